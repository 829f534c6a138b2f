package admincli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The pools' commands against a live dev server: lines, pools, grants,
// reclaims, events and reconcile, as tables and as JSON, and every refused
// input (which changes nothing).
func TestPoolsCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", "cli:"+token, "--dev-sqlite-path", path)
	ledger, err := sqlx.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	t.Setenv("QC_URL", s.URL)
	t.Setenv("QC_ADMIN_TOKEN", token)
	res := testenv.Resource(t)
	mustCLI(t, "policies", "set", res, "--type", "TOKENS", "--limit", "10000")

	out := mustCLI(t, "pools", "set", res, "--shared", "50", "--dedicated", "40", "--reclaim-confirm", "0")
	rows := columns(t, out)
	// Without lines, the dedicated share goes to the shared pool.
	if rows[1][0] != "shared" || rows[1][1] != "50 %" || rows[1][2] != "9,000 tokens" || rows[2][1] != "40 %" ||
		rows[3][2] != "1,000 tokens" || !strings.Contains(out, "confirmed after 0s") {
		t.Fatalf("pools set:\n%s", out)
	}
	mustCLI(t, "lines", "set", res, "core", "--tier", "CORE", "--weight", "3")
	rows = columns(t, mustCLI(t, "lines", "set", res, "explore", "--tier", "EXPLORE"))
	if len(rows) != 3 || rows[1][0] != "core" || rows[1][1] != "CORE" || rows[1][2] != "3" || rows[1][3] != "3,000 tokens" ||
		rows[2][0] != "explore" || rows[2][3] != "1,000 tokens" {
		t.Fatalf("lines set: %q", rows)
	}
	c, err := client.New(s.URL, client.WithAdminToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ap, err := c.Apply(context.Background(), client.ApplyRequest{ResourceName: res, ApplyAmount: 3500, BusinessLine: "core"})
	if err != nil {
		t.Fatal(err)
	}
	rows = columns(t, mustCLI(t, "lines", res))
	// 3,000 dedicated + 500 borrowed; CORE's watermark 95 %.
	if rows[1][4] != "3,500 tokens" || rows[1][5] != "500 tokens" || rows[1][11] != "95 %" {
		t.Fatalf("lines: %q", rows)
	}
	var lv struct {
		Layout client.PoolsConfig `json:"layout"`
		Status client.PoolStatus  `json:"status"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "lines", res, "-o", "json")), &lv); err != nil ||
		len(lv.Layout.Lines) != 2 || lv.Status.SharedUsed != 500 || lv.Status.Lines[0].Used != 3500 {
		t.Fatalf("lines -o json: %+v, %v", lv, err)
	}
	if rows = columns(t, mustCLI(t, "pools", res)); rows[1][2] != "5,000 tokens" || rows[1][3] != "500 tokens" ||
		rows[2][2] != "4,000 tokens" || rows[2][3] != "3,000 tokens" {
		t.Fatalf("pools: %q", rows)
	}

	until := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	mustCLI(t, "grant", res, "--amount", "700", "--until", until, "--line", "explore", "--reason", "launch day")
	var gs []client.PoolGrant
	if err := json.Unmarshal([]byte(mustCLI(t, "grants", res, "-o", "json")), &gs); err != nil || len(gs) != 1 || gs[0].Amount != 700 {
		t.Fatalf("grants -o json: %+v, %v", gs, err)
	}
	if rows = columns(t, mustCLI(t, "grants", res)); rows[1][1] != "GRANT" || rows[1][2] != "explore" || rows[1][10] != "launch day" || rows[1][9] != "-" ||
		rows[1][4] != "-" {
		t.Fatalf("grants: %q", rows)
	}
	if out := mustCLI(t, "grants", "void", res, gs[0].ID, "--reason", "launch moved"); !strings.Contains(out, gs[0].ID) {
		t.Fatalf("grants void: %s", out)
	}
	// The reason is the grant.void audit entry's.
	var voids []struct{ Reason string }
	if err := json.Unmarshal([]byte(mustCLI(t, "audit", "--resource", res, "--action", "grant.void", "-o", "json")), &voids); err != nil ||
		len(voids) != 1 || voids[0].Reason != "launch moved" {
		t.Fatalf("grant.void audit: %+v, %v", voids, err)
	}
	if gs, err := c.Grants(context.Background(), res); err != nil || len(gs) != 1 || gs[0].Active || gs[0].VoidedAt == nil {
		t.Fatalf("after void: %+v, %v", gs, err)
	}
	// A buffer release is listed with what its line still holds of it
	// (HELD), and its void says what buffer came back.
	mustCLI(t, "release", res, "--amount", "100", "--line", "explore", "--reason", "burst")
	if rows = columns(t, mustCLI(t, "grants", res)); len(rows) != 3 || rows[2][1] != "RELEASE" || rows[2][3] != "100" || rows[2][4] != "100" {
		t.Fatalf("grants with a release: %q", rows)
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "grants", res, "-o", "json")), &gs); err != nil || len(gs) != 2 ||
		gs[1].Held == nil || *gs[1].Held != 100 || gs[0].Held != nil {
		t.Fatalf("grants -o json with a release: %+v, %v", gs, err)
	}
	if out := mustCLI(t, "grants", "void", res, gs[1].ID); !strings.Contains(out, "buffer returned") || !strings.Contains(out, "100") {
		t.Fatalf("release void: %s", out)
	}

	now := time.Now().UnixMilli()
	for _, id := range []string{res + "-r1", res + "-r2"} {
		if _, err := ledger.Exec(`INSERT INTO quota_reclaim (id, resource_name, from_line, to_line, amount, state,
			dry_run, warned_ms, updated_ms, reason) VALUES (?, ?, 'explore', 'core', 200, 'WARNED', 0, ?, ?, 'pressed')`, id, res, now, now); err != nil {
			t.Fatalf("plant reclaim: %v", err)
		}
	}
	if rows = columns(t, mustCLI(t, "reclaims", res)); len(rows) != 3 || rows[1][1] != "WARNED" || rows[1][2] != "explore" {
		t.Fatalf("reclaims: %q", rows)
	}
	if rows = columns(t, mustCLI(t, "reclaims", "confirm", res, res+"-r1", "--reason", "ok")); rows[1][1] != "CONFIRMED" {
		t.Fatalf("reclaims confirm: %q", rows)
	}
	var rc client.Reclaim
	if err := json.Unmarshal([]byte(mustCLI(t, "reclaims", "cancel", res, res+"-r2", "-o", "json")), &rc); err != nil || rc.State != "CANCELLED" {
		t.Fatalf("reclaims cancel: %+v, %v", rc, err)
	}
	for i, kind := range []string{"LEND_REACTIVE", "WATERMARK_RAISED"} {
		if _, err := ledger.Exec(`INSERT INTO quota_pool_event (resource_name, at_ms, kind, line, amount, reason)
			VALUES (?, ?, ?, 'explore', ?, 'refused 3 times')`, res, now+int64(i), kind, 100*(i+1)); err != nil {
			t.Fatalf("plant event: %v", err)
		}
	}
	var evs []client.PoolEvent
	if err := json.Unmarshal([]byte(mustCLI(t, "events", res, "--limit", "1", "-o", "json")), &evs); err != nil ||
		len(evs) != 1 || evs[0].Kind != "WATERMARK_RAISED" || evs[0].Amount != 200 {
		t.Fatalf("events: %+v, %v", evs, err)
	}
	// The release and its void above journalled RELEASE and RETURN first.
	if rows = columns(t, mustCLI(t, "events", res)); len(rows) != 5 || rows[2][2] != "LEND_REACTIVE" || rows[2][3] != "explore" ||
		rows[2][6] != "refused 3 times" || rows[3][2] != "RETURN" || rows[4][2] != "RELEASE" {
		t.Fatalf("events table: %q", rows)
	}
	var reps []client.ReconcileReport
	if err := json.Unmarshal([]byte(mustCLI(t, "reconcile", res, "-o", "json")), &reps); err != nil || len(reps) != 1 || reps[0].Resource != res {
		t.Fatalf("reconcile: %+v, %v", reps, err)
	}
	if rows = columns(t, mustCLI(t, "reconcile", res)); rows[1][0] != res {
		t.Fatalf("reconcile table: %q", rows)
	}

	none := res + "-none"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lines"}, "want 1 argument"},
		{[]string{"lines", none}, "RESOURCE_NOT_FOUND"},
		{[]string{"lines", "set", res, "core"}, "--tier is required"},
		{[]string{"lines", "set", res, "core", "--tier", "CORE", "--weight", "2", "--dedicated", "5"}, "not both"},
		{[]string{"lines", "set", res, "core", "--tier", "BOSS"}, "INVALID_ARGUMENT"},
		{[]string{"lines", "set", res, "core", "--tier", "CORE", "--weight", "5000"}, "INVALID_ARGUMENT"},
		{[]string{"lines", "delete", res, "core"}, "CONFLICT"}, // an open session
		{[]string{"lines", "delete", res}, "want 2 argument(s)"},
		{[]string{"pools", "set", res}, "nothing to change"},
		{[]string{"pools", "set", res, "--shared", "90"}, "INVALID_ARGUMENT"}, // 90+40+10 ≠ 100
		{[]string{"pools", "set", res, "--elasticity", "WILD"}, "INVALID_ARGUMENT"},
		{[]string{"pools", "set", none, "--shared", "50"}, "RESOURCE_NOT_FOUND"},
		{[]string{"grants", "void", res, "g-none"}, "NOT_FOUND"},
		{[]string{"grants", none}, "RESOURCE_NOT_FOUND"},
		{[]string{"reclaims", "confirm", res, res + "-r1"}, "CONFLICT"}, // already confirmed
		{[]string{"reclaims", "cancel", res, "r-none"}, "NOT_FOUND"},
		{[]string{"reclaims", "confirm", res}, "want 2 argument(s)"},
		{[]string{"events", res, "--limit", "501"}, "INVALID_ARGUMENT"},
		{[]string{"events", res, "--limit", "0"}, "-limit"},
		{[]string{"reconcile", res, res}, "at most 1 argument"},
		{[]string{"reconcile", none}, "RESOURCE_NOT_FOUND"},
	} {
		if _, err := cli(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admin %v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
	// Nothing was changed by the refused commands.
	cfg, err := c.Pools(context.Background(), res)
	if err != nil || cfg.Pools.SharedPercent != 50 || cfg.Pools.Elasticity != "AUTO" || len(cfg.Lines) != 2 ||
		cfg.Lines[0].Weight != 3 || cfg.Lines[0].Tier != "CORE" {
		t.Fatalf("after refused commands: %+v, %v", cfg, err)
	}
	if rs, err := c.Reclaims(context.Background(), res); err != nil || len(rs) != 2 {
		t.Fatalf("reclaims after refused commands: %+v, %v", rs, err)
	}
	if _, err := c.Finish(context.Background(), client.FinishRequest{ResourceName: res, SessionID: ap.SessionID}); err != nil {
		t.Fatal(err)
	}
	if rows = columns(t, mustCLI(t, "lines", "delete", res, "explore")); len(rows) != 2 || rows[1][0] != "core" {
		t.Fatalf("lines delete: %q", rows)
	}
}
