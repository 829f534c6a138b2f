package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/app"
	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// pruneRows is the number of ledger rows seedPrune writes per resource.
const pruneRows = 180

// seedPrune writes a monthly policy for each of resources, created a year
// ago, and pruneRows ledger rows of each, 7 hours apart, all more than a
// week before the previous period (so the previous month's start is the
// rollup's target, which does not move with the hour); the newest is USING,
// so the rollup stops at it. It returns that row's start and the
// --ledger-retention under which the 101 oldest rows are deleted (the bound
// falls 3.5 hours from any row: a test's duration does not move a row
// across it).
func seedPrune(t *testing.T, st *mysqlstore.Store, resources ...string) (time.Time, string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	prevStart := time.Date(now.Year(), now.Month()-1, 1, 0, 0, 0, 0, time.UTC)
	base := prevStart.AddDate(0, 0, -60).Add(7 * time.Minute)
	for _, res := range resources {
		if _, _, err := st.PutPolicy(ctx, quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 100,
			ResetCron: "0 0 1 * *", Timezone: "UTC", LeakThresholdSeconds: 300, CreatedAt: now.AddDate(-1, 0, 0)}); err != nil {
			t.Fatal(err)
		}
		for i := range pruneRows {
			start := base.Add(time.Duration(i) * 7 * time.Hour)
			status, end := []string{"FINISHED", "LEAKED", "CANCELLED"}[i%3], any(start.Add(time.Minute).UnixMilli())
			if i == pruneRows-1 {
				status, end = "USING", nil
			}
			if _, err := st.DB().ExecContext(ctx, `INSERT INTO quota_usage (resource_name, client_id, session_id,
				period_start_ms, granted_amount, charged_amount, refunded_amount, start_ms, end_ms, status)
				VALUES (?, ?, ?, ?, 10, 7, 3, ?, ?, ?)`, res, fmt.Sprintf("c%d", i%4), fmt.Sprintf("%s-%d", res, i),
				prevStart.AddDate(0, -3, 0).UnixMilli(), start.UnixMilli(), end, status); err != nil {
				t.Fatal(err)
			}
		}
	}
	split := base.Add(100*7*time.Hour + 210*time.Minute)
	return base.Add((pruneRows - 1) * 7 * time.Hour), time.Since(split).Round(time.Second).String()
}

// migratedMySQL is a fresh, migrated MariaDB database: its DSN and a store
// on it.
func migratedMySQL(t *testing.T) (string, *mysqlstore.Store) {
	t.Helper()
	dsn := testenv.MustMySQL(t)
	st, err := mysqlstore.Open(context.Background(), dsn, mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn, st
}

// ledgerState is every row of the ledger's lifecycle tables, sorted.
func ledgerState(t *testing.T, st *mysqlstore.Store) []string {
	t.Helper()
	var out []string
	for _, table := range []string{"quota_usage", "quota_usage_rollup", "quota_usage_lifecycle"} {
		rows, err := st.DB().Queryx("SELECT * FROM " + table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			m := map[string]any{}
			if err := rows.MapScan(m); err != nil {
				t.Fatal(err)
			}
			out = append(out, table+fmt.Sprint(m))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(out)
	return out
}

type pruneJSON struct {
	DryRun    bool               `json:"dryRun"`
	Resources []lifecycle.Report `json:"resources"`
}

func decodePrune(t *testing.T, out string) pruneJSON {
	t.Helper()
	var r pruneJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	return r
}

// checkPruned holds a dry run's report and then the real run's to what
// seedPrune's rows must give, and the ledger to the dry run's word.
func checkPruned(t *testing.T, st *mysqlstore.Store, using time.Time, dry, real pruneJSON, before []string) {
	t.Helper()
	if !dry.DryRun || real.DryRun || len(dry.Resources) != 1 || len(real.Resources) != 1 {
		t.Fatalf("dry run %+v\nrun %+v", dry, real)
	}
	d, r := dry.Resources[0], real.Resources[0]
	if d.RowsRolled != pruneRows-1 || d.RowsDeleted != 101 || !d.Blocked || !d.RolledTo.Equal(using) || d.Error != "" {
		t.Fatalf("dry run %+v; want %d rows rolled up to the USING row at %s and 101 deleted", d, pruneRows-1, using)
	}
	d.DryRun = false
	if !reflect.DeepEqual(d, r) {
		t.Fatalf("the run did not do what the dry run said:\n run %+v\n dry %+v", r, d)
	}
	if got := ledgerState(t, st); len(got) == len(before) {
		t.Fatalf("the run changed nothing: %d rows", len(got))
	}
	var left int
	if err := st.DB().Get(&left, `SELECT COUNT(*) FROM quota_usage WHERE resource_name = ?`, r.Resource); err != nil ||
		left != pruneRows-int(r.RowsDeleted) {
		t.Fatalf("%d rows of %s left; want %d (%v)", left, r.Resource, pruneRows-r.RowsDeleted, err)
	}
}

// `quota-center ledger prune --dry-run` on MariaDB writes nothing and
// reports exactly what the run without it then does; --resource limits
// both to one resource, and a run without it does the rest (table output).
func TestLedgerPruneDryRunTellsWhatTheRunDoesOnMariaDB(t *testing.T) {
	ctx := context.Background()
	dsn, st := migratedMySQL(t)
	using, retention := seedPrune(t, st, "prune-a", "prune-b")
	base := []string{"--mysql-dsn", dsn, "--ledger-retention", retention, "--ledger-pause", "0s", "--ledger-rollup-batch", "50",
		"--ledger-delete-batch", "40", "--resource", "prune-a", "-o", "json"}
	before := ledgerState(t, st)
	var out bytes.Buffer
	if err := app.PruneLedger(ctx, append(base, "--dry-run"), &out); err != nil {
		t.Fatal(err)
	}
	dry := decodePrune(t, out.String())
	if got := ledgerState(t, st); !reflect.DeepEqual(got, before) {
		t.Fatal("the dry run changed the ledger")
	}
	out.Reset()
	if err := app.PruneLedger(ctx, base, &out); err != nil {
		t.Fatal(err)
	}
	checkPruned(t, st, using, dry, decodePrune(t, out.String()), before)
	var leftB int
	if err := st.DB().Get(&leftB, `SELECT COUNT(*) FROM quota_usage WHERE resource_name = 'prune-b'`); err != nil || leftB != pruneRows {
		t.Fatalf("--resource prune-a touched prune-b: %d rows left (%v)", leftB, err)
	}
	out.Reset()
	if err := app.PruneLedger(ctx, base[:len(base)-4], &out); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		lines[strings.Fields(l)[0]] = strings.Fields(l)
	}
	wantTo := using.Format(time.RFC3339)
	if a, b := lines["prune-a"], lines["prune-b"]; lines["RESOURCE"] == nil || fmt.Sprint(a) != fmt.Sprint([]string{"prune-a", "0", "0", wantTo, "true", "-"}) ||
		fmt.Sprint(b) != fmt.Sprint([]string{"prune-b", "179", "101", wantTo, "true", "-"}) {
		t.Fatalf("table:\n%s\nwant prune-a done already, prune-b 179 rolled up and 101 deleted", out.String())
	}
}

// The same pass on a SQLite ledger (the store's dev-mode backend).
func TestLedgerPruneDryRunTellsWhatTheRunDoesOnSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := mysqlstore.OpenSQLite(ctx, ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Skipf("no SQLite in this build: %v", err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	using, retention := seedPrune(t, st, "prune-a")
	cfg := config.Default().Ledger
	cfg.Pause, cfg.Batch, cfg.DeleteBatch = 0, 50, 40
	if cfg.Retention, err = time.ParseDuration(retention); err != nil {
		t.Fatal(err)
	}
	before := ledgerState(t, st)
	var out bytes.Buffer
	if err := app.PruneStore(ctx, st, cfg, true, "", "json", &out); err != nil {
		t.Fatal(err)
	}
	dry := decodePrune(t, out.String())
	if got := ledgerState(t, st); !reflect.DeepEqual(got, before) {
		t.Fatal("the dry run changed the ledger")
	}
	out.Reset()
	if err := app.PruneStore(ctx, st, cfg, false, "prune-a", "json", &out); err != nil {
		t.Fatal(err)
	}
	checkPruned(t, st, using, dry, decodePrune(t, out.String()), before)
}

// A bad flag, an unknown resource, a MySQL that cannot be reached or no
// DSN at all: an error that says so, nothing written or printed to stdout,
// and no password in the message.
func TestLedgerPruneRefusesBadInputAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	dsn, st := migratedMySQL(t)
	_, retention := seedPrune(t, st, "prune-a")
	before := ledgerState(t, st)
	t.Setenv("QC_MYSQL_DSN", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "not defined"},
		{[]string{"-o", "yaml"}, "want table or json"},
		{[]string{"--dry-run=maybe"}, "dry-run"},
		{[]string{"--ledger-retention", "-1h"}, "ledger-retention"},
		{[]string{"--ledger-rollup-after", "1h"}, "ledger-rollup-after"},
		{[]string{"prune"}, "unexpected argument"},
		{[]string{"--resource", "no-such-resource"}, `no policy for resource "no-such-resource"`},
	} {
		var out bytes.Buffer
		args := append([]string{"--mysql-dsn", dsn, "--ledger-retention", retention}, tc.args...)
		err := app.PruneLedger(ctx, args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out.Len() != 0 {
			t.Errorf("%v: %v, printed %q; want an error containing %q and nothing printed", tc.args, err, out.String(), tc.want)
		}
		if got := ledgerState(t, st); !reflect.DeepEqual(got, before) {
			t.Fatalf("%v changed the ledger", tc.args)
		}
	}
	var out bytes.Buffer
	err := app.PruneLedger(ctx, nil, &out)
	if err == nil || !strings.Contains(err.Error(), "needs QC_MYSQL_DSN") || !strings.Contains(err.Error(), "dev mode") {
		t.Errorf("no DSN: %v; want an error saying it needs QC_MYSQL_DSN and does not run in dev mode", err)
	}
	t.Setenv("QC_MYSQL_DSN", "qc:SECRET-pw@tcp(127.0.0.1:1)/qc")
	err = app.PruneLedger(ctx, []string{"--mysql-timeout", "1s"}, &out)
	if err == nil || !strings.Contains(err.Error(), "qc:***@tcp(127.0.0.1:1)") || strings.Contains(err.Error(), "SECRET-pw") || out.Len() != 0 {
		t.Errorf("unreachable MySQL: %v; want an error naming the DSN with its password masked", err)
	}
}
