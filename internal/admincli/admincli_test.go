package admincli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/admincli"
	"github.com/quotacenter/quota-center/internal/testenv"
)

const token = "cli-test-admin-token-0123456789"

// cli runs `quota-center admin args…` against s and returns stdout.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := admincli.Run(ctx, args, &out, &errOut)
	return out.String(), err
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cli(t, args...)
	if err != nil {
		t.Fatalf("admin %v: %v", args, err)
	}
	return out
}

// columns splits an aligned table into rows of cells (two or more spaces
// between cells), checking that every row starts its cells at the header's
// offsets.
func columns(t *testing.T, table string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	sep := regexp.MustCompile(`\S+(?: \S+)*`)
	header := sep.FindAllStringIndex(lines[0], -1)
	var rows [][]string
	for _, l := range lines {
		if l == "" || strings.HasPrefix(l, "more:") {
			break
		}
		var cells []string
		for i, m := range sep.FindAllStringIndex(l, -1) {
			// Columns are aligned in characters (tabwriter counts runes).
			if at, want := utf8.RuneCountInString(l[:m[0]]), utf8.RuneCountInString(lines[0][:header[min(i, len(header)-1)][0]]); i < len(header) && at != want {
				t.Fatalf("cell %d of %q starts at %d, its header at %d:\n%s", i, l, at, want, table)
			}
			cells = append(cells, l[m[0]:m[1]])
		}
		rows = append(rows, cells)
	}
	return rows
}

func TestAdminCommands(t *testing.T) {
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", "cli:"+token)
	t.Setenv("QC_URL", s.URL)
	t.Setenv("QC_ADMIN_TOKEN", token)
	res := testenv.Resource(t)

	rows := columns(t, mustCLI(t, "policies", "set", res, "--type", "TOKENS", "--limit", "1234567", "--cron", "0 0 * * *"))
	if rows[0][0] != "RESOURCE" || rows[1][0] != res || rows[1][2] != "1,234,567 tokens" || rows[1][3] != "0 0 * * *" {
		t.Fatalf("policies set: %q", rows)
	}
	// Flags before or after the argument, env or flag for the server.
	out := mustCLI(t, "policies", "patch", "--reason", "more", res, `{"totalLimit":2000000}`)
	if !strings.Contains(out, "2,000,000 tokens") {
		t.Fatalf("policies patch: %s", out)
	}
	var pol client.Policy
	if err := json.Unmarshal([]byte(mustCLI(t, "policies", "get", res, "-o", "json")), &pol); err != nil || pol.TotalLimit != 2000000 {
		t.Fatalf("policies get -o json: %+v, %v", pol, err)
	}
	var list []client.Policy
	if err := json.Unmarshal([]byte(mustCLI(t, "-o", "json", "policies", "list")), &list); err != nil || len(list) == 0 {
		t.Fatalf("policies list: %v, %v", list, err)
	}

	c, err := client.New(s.URL, client.WithAdminToken(token))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, cl := range []string{"svc-a", "svc-b", "svc-a"} {
		r, err := c.Apply(context.Background(), client.ApplyRequest{ResourceName: res, ApplyAmount: 1500, ClientID: cl})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.SessionID)
	}
	rows = columns(t, mustCLI(t, "status", res))
	if rows[1][0] != res || rows[1][3] != "4,500 tokens" || rows[1][5] != "3" {
		t.Fatalf("status: %q", rows)
	}
	rows = columns(t, mustCLI(t, "sessions", res, "--limit", "2", "--all"))
	if len(rows) != 4 || rows[1][2] != "-" || rows[1][3] != "USING" || rows[1][4] != "1,500 tokens" {
		t.Fatalf("sessions --all: %q", rows)
	}
	out = mustCLI(t, "sessions", res, "--limit", "2")
	if !strings.Contains(out, "more: --cursor ") {
		t.Fatalf("a first page says how to get the next: %s", out)
	}
	rows = columns(t, mustCLI(t, "finish", ids[0], "--amount", "100", "--reason", "stuck"))
	if rows[1][0] != ids[0] || rows[1][3] != "1,500 tokens" || rows[1][4] != "100 tokens" || rows[1][5] != "1,400 tokens" {
		t.Fatalf("finish: %q", rows)
	}
	rows = columns(t, mustCLI(t, "usage", res, "--by", "client"))
	if len(rows) != 3 || rows[1][0] != "svc-a" || rows[1][1] != "2" || rows[1][5] != "100 tokens" {
		t.Fatalf("usage: %q", rows)
	}
	// No business lines: one line "", shown as "-".
	rows = columns(t, mustCLI(t, "usage", res, "--by", "line"))
	if len(rows) != 2 || rows[0][0] != "LINE" || rows[1][0] != "-" || rows[1][1] != "3" {
		t.Fatalf("usage --by line: %q", rows)
	}
	var rep client.UsageReport
	if err := json.Unmarshal([]byte(mustCLI(t, "usage", res, "--by", "day", "-o", "json")), &rep); err != nil ||
		len(rep.Groups) != 1 || rep.Groups[0].Sessions != 3 {
		t.Fatalf("usage -o json: %+v, %v", rep, err)
	}
	var reset client.PeriodReset
	if err := json.Unmarshal([]byte(mustCLI(t, "reset", res, "--reason", "new budget", "-o", "json")), &reset); err != nil ||
		reset.ResourceName != res || !reset.PeriodStart.After(reset.PreviousPeriod.PeriodStart) {
		t.Fatalf("reset: %+v, %v", reset, err)
	}
	if rows = columns(t, mustCLI(t, "reset", res, "--reason", "again")); rows[1][0] != res || len(rows[1]) != 4 {
		t.Fatalf("reset table: %q", rows)
	}

	rows = columns(t, mustCLI(t, "audit", "--resource", res, "--limit", "3"))
	if len(rows) != 4 || rows[1][3] != "policy.reset" || rows[1][5] != "again" || rows[2][5] != "new budget" ||
		rows[3][3] != "session.finish" || rows[1][2] != "cli" {
		t.Fatalf("audit: %q", rows)
	}
	rows = columns(t, mustCLI(t, "audit", "--resource", res, "--actor", "cli", "--action", "policy.reset"))
	if len(rows) != 3 || rows[1][3] != "policy.reset" || rows[2][3] != "policy.reset" {
		t.Fatalf("audit --actor --action: %q", rows)
	}
	if rows = columns(t, mustCLI(t, "audit", "--resource", res, "--actor", "someone-else")); len(rows) != 1 {
		t.Fatalf("audit by another actor: %q", rows)
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, "audit", "--resource", res, "-o", "json")), &entries); err != nil || len(entries) != 5 {
		t.Fatalf("audit -o json: %d entries, %v", len(entries), err)
	}

	until := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	rows = columns(t, mustCLI(t, "grant", res, "--amount", "5000", "--until", until, "--reason", "launch"))
	if rows[1][1] != "GRANT" || rows[1][2] != "5,000" || rows[1][6] != "launch" {
		t.Fatalf("grant: %q", rows)
	}

	// Seconds as h:mm:ss.
	dur := testenv.Resource(t)
	rows = columns(t, mustCLI(t, "policies", "set", dur, "--type", "DURATION", "--limit", "18000"))
	if rows[1][2] != "5:00:00" {
		t.Fatalf("DURATION limit: %q", rows)
	}

	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"policies", "get", "no-such-" + testenv.RandomSuffix()}, "RESOURCE_NOT_FOUND"},
		{[]string{"policies", "patch", res, `{"totalLimit":`}, "not valid JSON"},
		{[]string{"policies", "patch", res, `{"totalLimit":-5}`}, "INVALID_ARGUMENT"},
		{[]string{"policies", "get"}, "want 1 argument"},
		{[]string{"status"}, "at least one resource"},
		{[]string{"sessions", res, "--status", "DONE"}, "INVALID_ARGUMENT"},
		{[]string{"finish", ids[1], "--amount", "ten"}, "--amount"},
		{[]string{"usage", res, "--from", "yesterday"}, "--from"},
		{[]string{"status", res, "-o", "yaml"}, "-o must be table or json"},
		{[]string{"sessions", res, "--token", "wrong-token-0123456789"}, "UNAUTHENTICATED"},
		{[]string{"policies", "delete", res}, "POLICY_IN_USE"},
		{[]string{"status", res, "--bogus"}, "flag provided but not defined"},
		{[]string{"audit", "--limit", "501"}, "INVALID_ARGUMENT"},
		{[]string{"grant", res, "--amount", "5"}, "--until is required"}, // checked before the API's "expiresAt"
		{[]string{"grant", res, "--until", "2099-01-01T00:00:00Z"}, "--amount is required"},
		{[]string{"release", res}, "--amount is required"},
		{[]string{"grant", res, "--amount", "5", "--until", "tomorrow"}, "--until"},
		{[]string{"release", res, "--amount", "5"}, "INVALID_ARGUMENT"}, // no buffer
		{[]string{"audit", "--resource", "Bad Name"}, "INVALID_ARGUMENT"},
		{[]string{"audit", "--action", "Policy Put"}, "INVALID_ARGUMENT"},
	} {
		if _, err := cli(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admin %v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
	if _, err := cli(t, "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	// Nothing was changed by the refused commands.
	if p, err := c.GetPolicy(context.Background(), res); err != nil || p.TotalLimit != 2000000 {
		t.Fatalf("after refused commands: %+v, %v", p, err)
	}
	for _, id := range ids[1:] {
		if _, err := c.Finish(context.Background(), client.FinishRequest{ResourceName: res, SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// A policy with a grant not voided is not deleted (the grant would
	// stay for a policy created again under the name): void it first.
	if _, err := cli(t, "policies", "delete", res); err == nil || !strings.Contains(err.Error(), "POLICY_IN_USE") {
		t.Fatalf("delete with a grant: %v, want POLICY_IN_USE", err)
	}
	var grants []client.PoolGrant
	if err := json.Unmarshal([]byte(mustCLI(t, "grants", res, "-o", "json")), &grants); err != nil || len(grants) != 1 {
		t.Fatalf("grants -o json: %+v, %v", grants, err)
	}
	mustCLI(t, "grants", "void", res, grants[0].ID)
	if out := mustCLI(t, "policies", "delete", res, "--reason", "done"); !strings.Contains(out, res) {
		t.Fatalf("delete: %s", out)
	}
	if code := get(t, s.URL+"/admin/policies/"+res); code != http.StatusNotFound {
		t.Fatalf("after delete: %d", code)
	}
}

func get(t *testing.T, url string) int {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
