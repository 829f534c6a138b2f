package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// now is the tests' clock: 2025-03-20 10:30 UTC.
var now = time.Date(2025, 3, 20, 10, 30, 0, 0, time.UTC)

// recorder is a Store that records the targets it is asked for and fails
// for the resources in fail; its candidates are every name in fail and
// targets, and those of names.
type recorder struct {
	targets map[string]time.Time
	fail    map[string]bool
	names   []string
}

func (r *recorder) Candidates(_ context.Context, _, _ time.Time, after string, limit int) (lifecycle.Candidates, error) {
	var out lifecycle.Candidates
	for _, n := range r.names {
		if n > after && len(out.Resources) < limit {
			out.Resources = append(out.Resources, n)
		}
	}
	if len(out.Resources) == limit {
		out.Next = out.Resources[limit-1]
	}
	return out, nil
}

func (r *recorder) RollupStep(_ context.Context, res string, target, _ time.Time, _ int) (lifecycle.RollupStep, error) {
	if r.fail[res] {
		return lifecycle.RollupStep{}, fmt.Errorf("rollup %s: %w", res, quota.ErrUnavailable)
	}
	r.targets[res] = target
	return lifecycle.RollupStep{Done: true, RolledTo: target}, nil
}

func (r *recorder) DeleteStep(context.Context, string, time.Time, int) (lifecycle.DeleteStep, error) {
	return lifecycle.DeleteStep{Done: true}, nil
}

func (r *recorder) Preview(context.Context, string, time.Time, time.Time, time.Time) (lifecycle.Preview, error) {
	return lifecycle.Preview{}, errors.New("not in this test")
}

type policies []quota.Policy

func (p policies) PoliciesOf(_ context.Context, names []string) (map[string]quota.Policy, error) {
	out := map[string]quota.Policy{}
	for _, n := range names {
		for _, q := range p {
			if q.ResourceName == n {
				out[n] = q
			}
		}
	}
	return out, nil
}

// names are the resource names of p, sorted.
func (p policies) names() []string {
	var out []string
	for _, q := range p {
		out = append(out, q.ResourceName)
	}
	sort.Strings(out)
	return out
}

func pol(name, cron string, created time.Time) quota.Policy {
	return quota.Policy{ResourceName: name, QuotaType: quota.TypeCount, TotalLimit: 100, ResetCron: cron,
		Timezone: "UTC", LeakThresholdSeconds: 300, CreatedAt: created, UpdatedAt: created}
}

func job(t *testing.T, cfg lifecycle.Config, s lifecycle.Store, p policies, reg prometheus.Registerer) *lifecycle.Job {
	t.Helper()
	j := lifecycle.New(cfg, s, p, &period.Scheduler{}, zap.NewNop(), reg)
	lifecycle.SetClock(j, func() time.Time { return now })
	return j
}

// TestTargetIsTheHourBeforeRecentRows: rows are rolled up to the UTC hour
// before now − RecentRows, inside the current period too (issue 23 §2: the
// current period's totals, which every rebuild reads, then read an hour or
// two of raw rows); with Config.ClosedPeriodsOnly (main's rule before) a
// closed period may be rolled up at once (RollupStep then waits at any row
// of it that may still change), the current one never, nor a row that
// started within RecentRows (issue 23 §2 (a): before, the target also
// stayed 8 days back, so a usage window over the last 30 days read 8 days
// of raw rows).
func TestTargetIsTheHourBeforeRecentRows(t *testing.T) {
	created := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	reset := pol("reset", "0 0 * * *", created)
	reset.ResetAt = now.Add(-2 * time.Hour)
	early := pol("early", "30 9 * * *", created)
	p := policies{
		pol("daily", "0 0 * * *", created),             // today, 2025-03-20 00:00
		pol("monthly", "0 0 1 * *", created),           // the current period started 2025-03-01
		pol("never", "", created),                      // one period since creation
		pol("young", "0 0 * * *", now.Add(-time.Hour)), // created an hour ago: rows of an earlier policy of its name may be rolled up
		reset, // reset 2 h ago (08:30): its current period starts there
		early, // its period started at 09:30, within RecentRows: now − 1 h, down to the hour
	}
	hour := time.Date(2025, 3, 20, 9, 0, 0, 0, time.UTC) // now (10:30) − 1 h, down to the hour
	for _, tc := range []struct {
		closedOnly bool
		want       map[string]time.Time
	}{
		{false, map[string]time.Time{"daily": hour, "monthly": hour, "never": hour, "young": hour, "reset": hour, "early": hour}},
		{true, map[string]time.Time{
			"daily":   time.Date(2025, 3, 20, 0, 0, 0, 0, time.UTC),
			"monthly": time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC),
			"never":   created,
			"young":   hour,
			"reset":   time.Date(2025, 3, 20, 8, 0, 0, 0, time.UTC),
			"early":   hour,
		}},
	} {
		rec := &recorder{targets: map[string]time.Time{}}
		rec.names = p.names()
		reg := prometheus.NewRegistry()
		cfg := lifecycle.Defaults()
		cfg.ClosedPeriodsOnly = tc.closedOnly
		reps, err := job(t, cfg, rec, p, reg).Pass(context.Background())
		if err != nil || len(reps) != len(p) {
			t.Fatalf("pass: %v, %d reports", err, len(reps))
		}
		if !reflect.DeepEqual(rec.targets, tc.want) {
			t.Fatalf("closed periods only %v: targets %v\nwant    %v", tc.closedOnly, rec.targets, tc.want)
		}
		if got := counter(t, reg, "quota_ledger_lifecycle_last_run_timestamp_seconds"); got == 0 {
			t.Fatal("last run not set")
		}
	}
}

func TestAFailedResourceIsReportedAndCountedAndTheOthersGoOn(t *testing.T) {
	created := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := &recorder{targets: map[string]time.Time{}, fail: map[string]bool{"a": true}, names: []string{"a", "b"}}
	reg := prometheus.NewRegistry()
	reps, err := job(t, lifecycle.Defaults(), rec, policies{pol("a", "0 0 * * *", created), pol("b", "0 0 * * *", created)}, reg).
		Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reps[0].Error, "unavailable") || reps[1].Error != "" || rec.targets["b"].IsZero() {
		t.Fatalf("reports %+v, targets %v", reps, rec.targets)
	}
	if n := counter(t, reg, "quota_ledger_lifecycle_errors_total"); n != 1 {
		t.Fatalf("errors counted %v; want 1", n)
	}
}

// counter reads a counter or gauge of reg by name.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// sqliteLedger is a migrated SQLite store with one daily policy and rows
// of it over days 1-15 of March 2025, the first of them USING (left open)
// on day 14. It returns the store and the number of rows.
func sqliteLedger(t *testing.T) (*mysqlstore.Store, quota.Policy, int) {
	t.Helper()
	ctx := context.Background()
	s, err := mysqlstore.OpenSQLite(ctx, ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p, _, err := s.PutPolicy(ctx, pol("res", "0 0 * * *", time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for h := range 15 * 24 {
		start := time.Date(2025, 3, 1, h, 7, 0, 0, time.UTC)
		status, end := "FINISHED", any(start.Add(time.Minute).UnixMilli())
		if h == 13*24+5 {
			status, end = "USING", nil
		}
		day := start.Truncate(24 * time.Hour).UnixMilli()
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO quota_usage (resource_name, client_id, session_id,
			period_start_ms, granted_amount, charged_amount, refunded_amount, start_ms, end_ms, status)
			VALUES ('res', ?, ?, ?, 10, 7, 3, ?, ?, ?)`, fmt.Sprintf("c%d", h%3), fmt.Sprintf("s%d", h),
			day, start.UnixMilli(), end, status); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return s, p, n
}

func usage(t *testing.T, s *mysqlstore.Store) []quota.UsageResult {
	t.Helper()
	var out []quota.UsageResult
	for _, g := range []string{quota.GroupByClient, quota.GroupByDay} {
		u, err := s.Usage(context.Background(), quota.UsageQuery{Resource: "res", GroupBy: g, MaxGroups: 1000,
			From: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 3, 16, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func TestDryRunReportsWhatAPassThenDoes(t *testing.T) {
	s, p, n := sqliteLedger(t)
	before := usage(t, s)
	cfg := lifecycle.Defaults()
	cfg.Retention, cfg.Pause, cfg.Batch, cfg.DeleteBatch = 10*24*time.Hour, 0, 50, 40
	cfg.DryRun = true
	dry, err := job(t, cfg, s, policies{p}, nil).Pass(context.Background())
	if err != nil || dry[0].Error != "" {
		t.Fatalf("dry run: %v %+v", err, dry)
	}
	// Target 2025-03-20 09:00 (now − 1 h, down to the hour); rows
	// start at :07 each hour, FINISHED but the USING one of 2025-03-14
	// 05:07, where the rollup stops: 13 days and 5 hours are rolled up;
	// those before 2025-03-10 10:30 (now − 10 days) are deleted: 9 days
	// and 11 hours (227 rows).
	want := lifecycle.Report{Resource: "res", Target: time.Date(2025, 3, 20, 9, 0, 0, 0, time.UTC),
		RolledTo: time.Date(2025, 3, 14, 5, 7, 0, 0, time.UTC), Blocked: true, RowsRolled: 13*24 + 5,
		RowsDeleted: 9*24 + 11, DryRun: true}
	if !reflect.DeepEqual(dry[0], want) {
		t.Fatalf("dry run %+v\nwant    %+v", dry[0], want)
	}
	var left int
	if err := s.DB().Get(&left, `SELECT COUNT(*) FROM quota_usage`); err != nil || left != n {
		t.Fatalf("the dry run changed the ledger: %d rows of %d (%v)", left, n, err)
	}
	cfg.DryRun = false
	reg := prometheus.NewRegistry()
	reps, err := job(t, cfg, s, policies{p}, reg).Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want.DryRun = false
	if !reflect.DeepEqual(reps[0], want) {
		t.Fatalf("pass %+v\nwant %+v", reps[0], want)
	}
	if err := s.DB().Get(&left, `SELECT COUNT(*) FROM quota_usage`); err != nil || left != n-int(want.RowsDeleted) {
		t.Fatalf("%d rows left; want %d (%v)", left, n-int(want.RowsDeleted), err)
	}
	if got := usage(t, s); !reflect.DeepEqual(got, before) {
		t.Fatalf("usage changed:\n got %+v\nwant %+v", got, before)
	}
	if counter(t, reg, "quota_ledger_rows_rolled_up_total") != float64(want.RowsRolled) ||
		counter(t, reg, "quota_ledger_rows_deleted_total") != float64(want.RowsDeleted) {
		t.Fatal("metrics do not match the report")
	}
	// Eight days later the USING row of 2025-03-14 05:07 still stops the rollup.
	j := job(t, cfg, s, policies{p}, nil)
	lifecycle.SetClock(j, func() time.Time { return now.Add(8 * 24 * time.Hour) })
	reps, err = j.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reps[0].Blocked || !reps[0].RolledTo.Equal(time.Date(2025, 3, 14, 5, 7, 0, 0, time.UTC)) {
		t.Fatalf("pass %+v; want blocked at the USING row", reps[0])
	}
	if got := usage(t, s); !reflect.DeepEqual(got, before) {
		t.Fatalf("usage changed:\n got %+v\nwant %+v", got, before)
	}
}

// counting is a Store and Policies that counts the calls a pass makes per
// resource, passing them on to a real store.
type counting struct {
	*mysqlstore.Store
	calls map[string]int // "candidates", "policies", and "rollup RES", "delete RES"
	asked [][]string     // the names of each PoliciesOf
}

func (c *counting) Candidates(ctx context.Context, roll, del time.Time, after string, limit int) (lifecycle.Candidates, error) {
	c.calls["candidates"]++
	return c.Store.Candidates(ctx, roll, del, after, limit)
}

func (c *counting) PoliciesOf(ctx context.Context, names []string) (map[string]quota.Policy, error) {
	c.calls["policies"]++
	c.asked = append(c.asked, names)
	return c.Store.PoliciesOf(ctx, names)
}

func (c *counting) RollupStep(ctx context.Context, res string, target, settled time.Time, batch int) (lifecycle.RollupStep, error) {
	c.calls["rollup "+res]++
	return c.Store.RollupStep(ctx, res, target, settled, batch)
}

func (c *counting) DeleteStep(ctx context.Context, res string, before time.Time, batch int) (lifecycle.DeleteStep, error) {
	c.calls["delete "+res]++
	return c.Store.DeleteStep(ctx, res, before, batch)
}

// TestAPassCostsTheSameWhateverTheIdlePolicies runs the same pass over the
// same ledger twice, once beside 3,000 policies without ledger rows: the
// store calls (each a bounded number of statements, counted per statement
// on MariaDB by internal/mysqlstore's TestLifecyclePassStatementsDoNotGrowWithIdlePolicies)
// and the reports are the same, and no idle resource is read or visited.
func TestAPassCostsTheSameWhateverTheIdlePolicies(t *testing.T) {
	cfg := lifecycle.Defaults()
	cfg.Retention, cfg.Pause, cfg.Batch, cfg.DeleteBatch = 10*24*time.Hour, 0, 50, 40
	var last *mysqlstore.Store
	pass := func(s *mysqlstore.Store) (map[string]int, [][]string, []lifecycle.Report) {
		c := &counting{Store: s, calls: map[string]int{}}
		j := lifecycle.New(cfg, c, c, &period.Scheduler{}, zap.NewNop(), nil)
		lifecycle.SetClock(j, func() time.Time { return now })
		reps, err := j.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return c.calls, c.asked, reps
	}
	run := func(idle int) (map[string]int, [][]string, []lifecycle.Report) {
		s, _, _ := sqliteLedger(t)
		for i := range idle {
			if _, _, err := s.PutPolicy(context.Background(), pol(fmt.Sprintf("idle-%04d", i), "0 0 * * *", now.AddDate(-1, 0, 0))); err != nil {
				t.Fatal(err)
			}
		}
		last = s
		return pass(s)
	}
	calls0, asked0, reps0 := run(0)
	calls, asked, reps := run(3000)
	if !reflect.DeepEqual(calls, calls0) || !reflect.DeepEqual(asked, asked0) {
		t.Fatalf("calls with 3,000 idle policies %v (policies of %v)\nwithout %v (policies of %v)", calls, asked, calls0, asked0)
	}
	// 317 rows rolled up in batches of 50 (up to the USING row), 227
	// deleted in batches of 40.
	want := map[string]int{"candidates": 1, "policies": 1, "rollup res": 7, "delete res": 6}
	if !reflect.DeepEqual(calls, want) || !reflect.DeepEqual(asked, [][]string{{"res"}}) {
		t.Fatalf("calls %v, policies of %v; want %v and [[res]]", calls, asked, want)
	}
	if !reflect.DeepEqual(reps, reps0) || len(reps) != 1 || reps[0].RowsRolled != 13*24+5 || reps[0].RowsDeleted != 9*24+11 {
		t.Fatalf("reports %+v\nwithout idle policies %+v", reps, reps0)
	}
	// A second pass at the same time finds the resource still waiting at
	// its USING row: one rollup step (blocked) and one delete step (nothing
	// left below the retention).
	calls, _, reps = pass(last)
	want = map[string]int{"candidates": 1, "policies": 1, "rollup res": 1, "delete res": 1}
	if !reflect.DeepEqual(calls, want) || len(reps) != 1 || !reps[0].Blocked || reps[0].RowsRolled != 0 {
		t.Fatalf("second pass: calls %v, reports %+v; want %v, blocked, nothing rolled", calls, reps, want)
	}
	// Once the session is settled, a pass rolls up to the target and the
	// next one has nothing left: the resource is not even visited.
	if _, err := last.DB().Exec(`UPDATE quota_usage SET status = 'FINISHED', end_ms = start_ms + 60000 WHERE status = 'USING'`); err != nil {
		t.Fatal(err)
	}
	if _, _, reps = pass(last); len(reps) != 1 || reps[0].Blocked || !reps[0].RolledTo.Equal(reps[0].Target) {
		t.Fatalf("pass after the finish: %+v; want rolled up to the target", reps)
	}
	if calls, _, reps := pass(last); !reflect.DeepEqual(calls, map[string]int{"candidates": 1}) || len(reps) != 0 {
		t.Fatalf("last pass: calls %v, reports %+v; want one candidates read and nothing else", calls, reps)
	}
}

// TestAPassPagesThroughTheCandidates visits every candidate of a store
// whose candidates span several pages, each once, in name order.
func TestAPassPagesThroughTheCandidates(t *testing.T) {
	created := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := &recorder{targets: map[string]time.Time{}}
	var p policies
	for i := range 2*lifecycle.CandidatePage + 7 {
		p = append(p, pol(fmt.Sprintf("r%05d", i), "0 0 * * *", created))
	}
	rec.names = append(p.names(), "deleted-policy")
	sort.Strings(rec.names)
	reps, err := job(t, lifecycle.Defaults(), rec, p, nil).Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != len(p) || len(rec.targets) != len(p) {
		t.Fatalf("%d reports, %d resources rolled up; want %d", len(reps), len(rec.targets), len(p))
	}
	for i, r := range reps {
		if r.Resource != p[i].ResourceName {
			t.Fatalf("report %d is of %s; want %s", i, r.Resource, p[i].ResourceName)
		}
	}
}
