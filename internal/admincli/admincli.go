package admincli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/quotacenter/quota-center/api/client"
)

// DefaultURL is the server the CLI calls when neither --url nor QC_URL is
// given: dev mode's address.
const DefaultURL = "http://127.0.0.1:8080"

// globals are the flags every command takes.
type globals struct {
	url, token, output string
	timeout            time.Duration
	stdout             io.Writer
}

// register adds the global flags to fs. The flags' defaults are empty,
// never taken from the environment: the flag package prints defaults in
// -h and after every flag error, and a token (or a URL with a password)
// would be printed with them (issue 22 §2). QC_URL and QC_ADMIN_TOKEN are
// read when the client is built (flags win).
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "url", "", "server base URL (env QC_URL, default "+DefaultURL+")")
	fs.StringVar(&g.token, "token", "", "admin bearer token (env QC_ADMIN_TOKEN; never printed)")
	fs.StringVar(&g.output, "o", "table", "output: table or json")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "time limit of each call")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// client builds the API client, filling the url and token not given as
// flags from QC_URL (else DefaultURL) and QC_ADMIN_TOKEN.
func (g *globals) client() (*client.Client, error) {
	if g.output != "table" && g.output != "json" {
		return nil, fmt.Errorf("-o must be table or json, not %q", g.output)
	}
	if g.url == "" {
		g.url = envOr("QC_URL", DefaultURL)
	}
	if g.token == "" {
		g.token = os.Getenv("QC_ADMIN_TOKEN")
	}
	return client.New(g.url, client.WithAdminToken(g.token), client.WithTimeout(g.timeout),
		client.WithUserAgent("quota-center-admin/1"))
}

// emit writes v as indented JSON with -o json, else calls table.
func (g *globals) emit(v any, table func(w *tabwriter.Writer)) error {
	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}

// newFlags is a flag set with the global flags; errors are returned, not
// printed and exited on.
func (g *globals) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	g.register(fs)
	return fs
}

// Run executes `quota-center admin args…`, writing results to stdout and
// usage to stderr. It returns flag.ErrHelp after -h, and the server's error
// (a *client.Error, whose message has the wire code) when a call fails.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &globals{stdout: stdout}
	root := &ffcli.Command{
		Name:       "admin",
		ShortUsage: "quota-center admin <command> [flags] [args]",
		ShortHelp:  "the operators' commands",
		LongHelp: "Calls the admin API of a quota-center server: --url (QC_URL, default " + DefaultURL + ") with the admin\n" +
			"token --token (QC_ADMIN_TOKEN). Tables for people, -o json for scripts. Amounts are in the\n" +
			"policy's unit; in tables seconds show as h:mm:ss and other units with thousands separators.",
		FlagSet: g.newFlags("admin"),
		Subcommands: []*ffcli.Command{
			g.policiesCmd(), g.statusCmd(), g.sessionsCmd(), g.usageCmd(), g.resetCmd(), g.finishCmd(), g.grantCmd(false), g.grantCmd(true), g.auditCmd(),
		},
		Exec: helpOrUnknown,
	}
	setOutput(root, stderr)
	if err := root.Parse(args); err != nil {
		return err
	}
	return root.Run(ctx)
}

// helpOrUnknown is the Exec of a command that only groups subcommands:
// without arguments it asks for the help text (flag.ErrHelp, exit status
// 0); with one, that argument named no subcommand, which is an error.
func helpOrUnknown(_ context.Context, args []string) error {
	if len(args) == 0 {
		return flag.ErrHelp
	}
	return fmt.Errorf("unknown command %q (quota-center admin -h lists them)", args[0])
}

func setOutput(c *ffcli.Command, w io.Writer) {
	c.FlagSet.SetOutput(w)
	for _, s := range c.Subcommands {
		setOutput(s, w)
	}
}

// positionals parses the flags that come after the first positional
// argument too (the flag package stops at it: `sessions codex --limit 5`)
// and returns the positional arguments.
func positionals(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return pos, nil
}

// positiveInt is an int flag that refuses values below 1 when it is
// parsed, so that a given 0 or negative is an error rather than read as
// "not given" (the flag's zero value, which lets the server's default
// apply). The server still checks the upper bound.
type positiveInt struct{ p *int }

func (v positiveInt) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v positiveInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return errors.New("want a whole number, at least 1")
	}
	*v.p = n
	return nil
}
