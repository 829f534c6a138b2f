package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// secretEnv holds every secret the commands read from the environment,
// each a distinct marker that no help or error text could contain by
// chance.
var secretEnv = map[string]string{
	"QC_ADMIN_TOKEN":             "SECRET-admin-token-aaaaaaaa",
	"QC_ADMIN_TOKENS":            "ops:SECRET-admin-tokens-bbbbbbbb",
	"QC_API_KEYS":                "SECRET-api-key-cccccccc=client:*",
	"QC_REDIS_PASSWORD":          "SECRET-redis-password-dddd",
	"QC_REDIS_SENTINEL_PASSWORD": "SECRET-sentinel-password-eeee",
	"QC_MYSQL_DSN":               "qc:SECRET-mysql-password-ffff@tcp(127.0.0.1:1)/qc",
	"QC_URL":                     "http://ops:SECRET-url-password-gggg@127.0.0.1:1",
}

// secretMarkers are the parts of secretEnv's values that must never be
// printed.
var secretMarkers = []string{
	"SECRET-admin-token-aaaaaaaa", "SECRET-admin-tokens-bbbbbbbb", "SECRET-api-key-cccccccc",
	"SECRET-redis-password-dddd", "SECRET-sentinel-password-eeee", "SECRET-mysql-password-ffff", "SECRET-url-password-gggg",
}

// runCaptured runs the command and returns everything it wrote: stdout,
// stderr, the process's os.Stderr (where the serve and migrate flag sets
// print their usage) and the error's text.
func runCaptured(t *testing.T, args ...string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = f
	var out, errOut bytes.Buffer
	runErr := run(context.Background(), args, &out, &errOut)
	os.Stderr = saved
	printed, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	all := out.String() + errOut.String() + string(printed)
	if runErr != nil {
		all += runErr.Error()
	}
	return all
}

// adminCommands lists the subcommand paths that `admin -h` and the
// grouping commands' help name (SUBCOMMANDS sections), so that a new
// command is covered without editing this test.
func adminCommands(t *testing.T, path []string) [][]string {
	t.Helper()
	help := runCaptured(t, append(append([]string{"admin"}, path...), "-h")...)
	var cmds [][]string
	in := false
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "SUBCOMMANDS":
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			sub := append(append([]string{}, path...), strings.Fields(line)[0])
			cmds = append(cmds, sub)
			cmds = append(cmds, adminCommands(t, sub)...)
		}
	}
	return cmds
}

// No secret from the environment is ever printed by a help text or a
// flag error: not as a flag's default (issue 22 §2: `admin -h` printed
// QC_ADMIN_TOKEN), not quoted in a message.
func TestHelpAndFlagErrorsPrintNoSecret(t *testing.T) {
	for k, v := range secretEnv {
		t.Setenv(k, v)
	}
	cmds := [][]string{{"serve"}, {"migrate"}, {"ledger", "prune"}, {"admin"}}
	admin := adminCommands(t, nil)
	if len(admin) < 10 {
		t.Fatalf("found %d admin commands in the help, want every one: %v", len(admin), admin)
	}
	for _, c := range admin {
		cmds = append(cmds, append([]string{"admin"}, c...))
	}
	for _, c := range cmds {
		for _, tail := range [][]string{{"-h"}, {"--help"}, {"--no-such-flag"}, {"--timeout", "soon"}, {"--url"}} {
			if c[0] != "admin" && tail[0] == "--url" {
				tail = []string{"--http-addr"} // a flag without its value
			}
			args := append(append([]string{}, c...), tail...)
			printed := runCaptured(t, args...)
			if printed == "" {
				t.Errorf("%v printed nothing", args)
			}
			for _, s := range secretMarkers {
				if strings.Contains(printed, s) {
					t.Errorf("%v printed the secret %s:\n%s", args, s, printed)
				}
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"--bogus"}, {"bogus"}, {"ledger"}, {"ledger", "bogus"}, {"ledger", "prune", "--dry-run"}} {
		printed := runCaptured(t, args...)
		for _, s := range secretMarkers {
			if strings.Contains(printed, s) {
				t.Errorf("%v printed the secret %s", args, s)
			}
		}
	}
}
