package mysqlstore

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	qcperiod "github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// lcPassNow is the clock of the pass tests: 20 days after lcBase, so that
// lcLedger's three days are past the rollup's target, and lcPassConfig's
// retention deletes the rows of the first day.
var lcPassNow = lcBase.Add(20*24*time.Hour + 12*time.Hour)

func lcPassConfig() lifecycle.Config {
	cfg := lifecycle.Defaults()
	cfg.Retention, cfg.Batch, cfg.DeleteBatch, cfg.Pause = 19*24*time.Hour+12*time.Hour, 97, 61, 0
	return cfg
}

// lcPassStore is a fresh MariaDB store on one connection (so that the
// session's Questions count every statement the store sends) with the
// policies of "busy" and "quiet" and idle policies more without a ledger
// row; "busy" has 600 ledger rows over lcLedger's three days, "quiet" 40
// rows already rolled up to after them (its watermark is past them and they
// are within the retention).
func lcPassStore(t *testing.T, idle int) *Store {
	t.Helper()
	s := MustMySQL(t)
	s.db.SetMaxOpenConns(1)
	s.db.SetConnMaxLifetime(0)
	s.db.SetConnMaxIdleTime(0)
	ctx := testCtx(t)
	for _, r := range []string{"busy", "quiet"} {
		if _, _, err := s.PutPolicy(ctx, quota.Policy{ResourceName: r, QuotaType: quota.TypeCount, TotalLimit: 100,
			ResetCron: "0 0 * * *", Timezone: "UTC", LeakThresholdSeconds: 300, CreatedAt: lcBase.AddDate(0, -1, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < idle; i += 500 {
		var nums []string
		for j := i; j < min(i+500, idle); j++ {
			nums = append(nums, fmt.Sprintf("SELECT %d AS i", j))
		}
		if _, err := s.db.ExecContext(ctx, `INSERT INTO quota_policy (`+policyColumns+`)
			SELECT CONCAT('idle-', LPAD(n.i, 6, '0')), quota_type, total_limit, reset_cron, timezone,
				leak_threshold_seconds, fail_mode, created_ms, updated_ms, period_anchor_ms
			FROM quota_policy p JOIN (`+strings.Join(nums, " UNION ALL ")+`) n WHERE p.resource_name = 'busy'`); err != nil {
			t.Fatal(err)
		}
	}
	lcLedger(t, s, "busy", 600, 1)
	quiet := make([]lcRow, 40)
	for i := range quiet {
		start := lcPassNow.Add(-10 * 24 * time.Hour).Add(time.Duration(i) * time.Minute)
		quiet[i] = lcRow{start: start, end: start.Add(time.Minute), status: "FINISHED", client: "q", granted: 5, charged: 3, refund: 2}
	}
	lcInsert(t, s, "quiet", quiet)
	if _, err := s.db.ExecContext(ctx, `INSERT INTO quota_usage_lifecycle (resource_name, rolled_to_ms) VALUES ('quiet', ?)`,
		msOf(lcPassNow.Add(-9*24*time.Hour))); err != nil {
		t.Fatal(err)
	}
	return s
}

// questions is the number of statements the store's one connection has
// sent; the SHOW itself is one of them.
func questions(t *testing.T, s *Store) (int64, int64) {
	t.Helper()
	var id int64
	if err := s.db.GetContext(testCtx(t), &id, `SELECT CONNECTION_ID()`); err != nil {
		t.Fatal(err)
	}
	var row struct {
		Name  string `db:"Variable_name"`
		Value int64  `db:"Value"`
	}
	if err := s.db.GetContext(testCtx(t), &row, `SHOW SESSION STATUS LIKE 'Questions'`); err != nil {
		t.Fatal(err)
	}
	return row.Value, id
}

// countedPass runs pass on s and returns its reports, the statements it
// sent, and the ledger, its sums and busy's watermark after it (ids,
// session ids and times of writing left out: they differ between stores).
func countedPass(t *testing.T, s *Store, pass func(j *lifecycle.Job) []lifecycle.Report) ([]lifecycle.Report, int64, []string) {
	t.Helper()
	cfg := lcPassConfig()
	cfg.Now = func() time.Time { return lcPassNow }
	j := lifecycle.New(cfg, s, s, &qcperiod.Scheduler{}, zap.NewNop(), nil)
	q0, c0 := questions(t, s)
	reps := pass(j)
	q1, c1 := questions(t, s)
	if c0 != c1 {
		t.Fatalf("the store changed connections (%d, %d): its statements were not all counted", c0, c1)
	}
	var state []string
	for _, q := range []string{`SELECT * FROM quota_usage`, `SELECT * FROM quota_usage_rollup`,
		`SELECT resource_name, rolled_to_ms FROM quota_usage_lifecycle WHERE resource_name = 'busy'`} {
		rows, err := s.db.QueryxContext(testCtx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			m := map[string]any{}
			if err := rows.MapScan(m); err != nil {
				t.Fatal(err)
			}
			delete(m, "id")
			delete(m, "session_id") // lcInsert makes it unique per run
			delete(m, "created_at")
			state = append(state, fmt.Sprint(m))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(state)
	// Questions counts the SELECT CONNECTION_ID() and the SHOW of the second
	// read: two statements that are not the pass's.
	return reps, q1 - q0 - 2, state
}

// TestLifecyclePassStatementsDoNotGrowWithIdlePolicies counts the
// statements a lifecycle pass sends (MariaDB's session Questions) with no
// idle policy and with 3,000: the same number, the same reports and the
// same ledger after it. A pass that visits every policy, as the job did
// before (list them all, then each one's rollup and deletion steps), ends
// with the same ledger, sums and reports (those with rows) at ~10
// statements per idle policy (it also moves the watermark of each idle
// resource, over no row). A second pass finds nothing to do in one
// statement.
func TestLifecyclePassStatementsDoNotGrowWithIdlePolicies(t *testing.T) {
	pass := func(j *lifecycle.Job) []lifecycle.Report {
		reps, err := j.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return reps
	}
	reps0, n0, state0 := countedPass(t, lcPassStore(t, 0), pass)
	s := lcPassStore(t, 3000)
	reps, n, state := countedPass(t, s, pass)
	if n != n0 || !reflect.DeepEqual(reps, reps0) || !reflect.DeepEqual(state, state0) {
		t.Fatalf("with 3,000 idle policies: %d statements, reports %+v\nwithout: %d statements, reports %+v\n(ledgers equal: %v)",
			n, reps, n0, reps0, reflect.DeepEqual(state, state0))
	}
	if len(reps) != 1 || reps[0].Resource != "busy" || reps[0].RowsRolled != 600 || reps[0].RowsDeleted == 0 || reps[0].Error != "" {
		t.Fatalf("reports %+v; want busy's 600 rows rolled up and its first day's deleted", reps)
	}
	if _, again, _ := countedPass(t, s, pass); again != 1 {
		t.Fatalf("a second pass sent %d statements; want 1 (the candidates' read)", again)
	}

	every := func(j *lifecycle.Job) []lifecycle.Report {
		pols, err := s.ListPolicies(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []lifecycle.Report
		for _, p := range pols {
			if r := j.Visit(context.Background(), p); r.RowsRolled > 0 || r.RowsDeleted > 0 || r.Error != "" {
				out = append(out, r)
			}
		}
		return out
	}
	s = lcPassStore(t, 300)
	repsAll, nAll, stateAll := countedPass(t, s, every)
	if !reflect.DeepEqual(repsAll, reps) || !reflect.DeepEqual(stateAll, state) {
		t.Fatalf("visiting every policy: reports %+v\nthe pass's %+v\n(ledgers equal: %v)", repsAll, reps, reflect.DeepEqual(stateAll, state))
	}
	t.Logf("statements of a pass: %d with 0 or 3,000 idle policies; %d visiting each of 300", n, nAll)
	if nAll < 300 {
		t.Fatalf("visiting every policy sent %d statements; the comparison measures nothing", nAll)
	}
}

// TestLifecycleCandidatesPage reads the candidates a page of two resources
// at a time: every resource with rows to roll up or delete once, in name
// order, and none other.
func TestLifecycleCandidatesPage(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		start := lcPassNow.Add(-30 * 24 * time.Hour)
		for i, r := range []string{"a", "b", "c", "d", "e"} {
			lcInsert(t, s, r, []lcRow{{start: start, end: start.Add(time.Minute), status: "FINISHED", client: "x", granted: 1, charged: 1}})
			if i%2 == 1 { // b, d: rolled up past their row, which is within the retention
				if _, err := s.db.ExecContext(testCtx(t), `INSERT INTO quota_usage_lifecycle (resource_name, rolled_to_ms) VALUES (?, ?)`,
					r, msOf(start.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
			}
		}
		roll := lcPassNow.Add(-8 * 24 * time.Hour)
		var got []string
		pages := 0
		for after := ""; ; pages++ {
			page, err := s.Candidates(testCtx(t), roll, time.Time{}, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Resources...)
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if !reflect.DeepEqual(got, []string{"a", "c", "e"}) || pages != 2 {
			t.Fatalf("candidates %v in %d pages; want [a c e] in 3", got, pages+1)
		}
		// With a retention that has passed their row, b and d are
		// candidates too (to delete).
		page, err := s.Candidates(testCtx(t), roll, start.Add(time.Minute), "", 10)
		if err != nil || !reflect.DeepEqual(page.Resources, []string{"a", "b", "c", "d", "e"}) || page.Next != "" {
			t.Fatalf("candidates %+v (%v); want all five in one page", page, err)
		}
	})
}
