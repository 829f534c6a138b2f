package mysqlstore

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	qcperiod "github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// lcSim is a session of TestLifecycleRollupsStayExactOnRandomTraffic.
type lcSim struct {
	rec quota.UsageRecord
}

// rawUsage is Usage over the raw rows only (UsageSQL on the whole range,
// whatever the watermark): what the answer was before any rollup.
func rawUsage(t *testing.T, s *Store, q quota.UsageQuery) quota.UsageResult {
	t.Helper()
	query, err := UsageSQL(q.GroupBy)
	if err != nil {
		t.Fatal(err)
	}
	var rows []usageGroupRow
	if err := s.db.SelectContext(testCtx(t), &rows, query, q.Resource, msOf(q.From), msOf(q.To), q.MaxGroups+1); err != nil {
		t.Fatal(err)
	}
	out, err := usageResult(q, rows)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rawPeriodTotals is PeriodTotals over the raw rows only.
func rawPeriodTotals(t *testing.T, s *Store, res string, p time.Time) quota.PeriodTotals {
	t.Helper()
	var tot struct {
		Reserved int64 `db:"reserved"`
		Charged  int64 `db:"charged"`
	}
	if err := s.db.GetContext(testCtx(t), &tot, `SELECT
		COALESCE(SUM(CASE WHEN status = 'USING' THEN charged_amount ELSE 0 END), 0) AS reserved,
		COALESCE(SUM(CASE WHEN status IN ('FINISHED', 'LEAKED') THEN charged_amount ELSE 0 END), 0) AS charged
		FROM quota_usage WHERE resource_name = ? AND period_start_ms = ?`, res, msOf(p)); err != nil {
		t.Fatal(err)
	}
	return quota.PeriodTotals{Charged: tot.Charged, Reserved: tot.Reserved}
}

// TestLifecycleRollupsStayExactOnRandomTraffic (issue 23 §2 (a)) runs the
// lifecycle job, with its rule that rows are rolled up to the hour before
// now − RecentRows, inside the current period too (or, one run in four,
// Config.ClosedPeriodsOnly: no further than the current period's start),
// hour by hour of simulated time beside random
// traffic written through the store's own methods: applies (some at the
// last and first millisecond of a daily period), finishes, cancels, sweeps
// of sessions past their lease as LEAKED (so leaks land on period edges),
// late finishes of leaked sessions within QC_FINISHED_RETENTION (24 h;
// the job's RollupAfter is 25 h), and fail-open sessions recorded late, with
// a start up to 8 hours back (often below the watermark), then left open,
// finished or swept. After every hour, GET /admin/usage (each
// grouping, whole-hour windows: the last 30 days, each period, a window
// starting inside the rolled-up range) and every period's totals, read
// through the rollups and the raw rows above the watermark, must equal the
// same read over the raw rows only, and so must the seed snapshot's totals
// of the current period; no USING row is below the watermark unless it is
// listed (a late one), and the watermark stays RecentRows behind now (with
// ClosedPeriodsOnly, at or before the current period's start).
func TestLifecycleRollupsStayExactOnRandomTraffic(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		lcRandomRun(t, s, uint64(time.Now().UnixNano()%1000))
	})
}

func lcRandomRun(t *testing.T, s *Store, seed uint64) {
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	res := fmt.Sprintf("lcr-%d-%d", seed, time.Now().UnixNano())
	pol := quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 1 << 40, ResetCron: "0 0 * * *",
		Timezone: "UTC", LeakThresholdSeconds: 300, CreatedAt: lcBase.Add(-24 * time.Hour), UpdatedAt: lcBase.Add(-24 * time.Hour)}
	if _, _, err := s.PutPolicy(testCtx(t), pol); err != nil {
		t.Fatal(err)
	}
	const finishedRetention, lease = 24 * time.Hour, 2 * time.Hour
	var now time.Time
	cfg := lifecycle.Config{Interval: time.Hour, RollupAfter: finishedRetention + time.Hour,
		Batch: 1 + rng.IntN(40), DeleteBatch: 100, Now: func() time.Time { return now },
		ClosedPeriodsOnly: rng.IntN(4) == 0}
	t.Logf("closed periods only: %v", cfg.ClosedPeriodsOnly)
	job := lifecycle.New(cfg, s, s, &qcperiod.Scheduler{}, zap.NewNop(), nil)
	var open, leaked []lcSim
	n := 0
	day := 24 * time.Hour
	for h := 1; h <= 4*24; h++ {
		now = lcBase.Add(time.Duration(h) * time.Hour)
		// Applies that started in the hour before now; some on a period's edge.
		for range rng.IntN(6) {
			start := now.Add(-time.Duration(rng.Int64N(int64(time.Hour)))).Truncate(time.Millisecond)
			switch {
			case now.Truncate(day).Equal(now) && rng.IntN(2) == 0:
				start = now.Add(-time.Millisecond) // the last millisecond of a period
			case now.Add(-time.Hour).Truncate(day).Equal(now.Add(-time.Hour)) && rng.IntN(2) == 0:
				start = now.Add(-time.Hour) // the first of the next
			}
			g := 1 + rng.Int64N(100)
			n++
			rec := quota.UsageRecord{ResourceName: res, ClientID: []string{"a", "b", "c"}[rng.IntN(3)],
				SessionID: fmt.Sprintf("%s-%d", res, n), PeriodStart: start.Truncate(day), ApplyAmount: g,
				GrantedAmount: g, ChargedAmount: g, StartTime: start, Status: quota.StatusUsing,
				BusinessLine: []string{"", "x"}[rng.IntN(2)]}
			if err := s.InsertSession(testCtx(t), rec); err != nil {
				t.Fatal(err)
			}
			// An apply answered 503: its row is cancelled.
			if rng.IntN(8) == 0 {
				rec.EndTime = start.Add(time.Second)
				if err := s.CancelSession(testCtx(t), rec); err != nil {
					t.Fatal(err)
				}
				continue
			}
			open = append(open, lcSim{rec: rec})
		}
		// A fail-open session recorded late by reconciliation (MySQL was
		// down): its start up to 8 h back, often below the watermark.
		if rng.IntN(3) == 0 {
			start := now.Add(-time.Duration(rng.Int64N(int64(8 * time.Hour)))).Truncate(time.Millisecond)
			g := 1 + rng.Int64N(100)
			n++
			rec := quota.UsageRecord{ResourceName: res, ClientID: "fo", SessionID: fmt.Sprintf("%s-%d", res, n),
				PeriodStart: start.Truncate(day), ApplyAmount: g, GrantedAmount: g, ChargedAmount: g,
				StartTime: start, Status: quota.StatusUsing}
			if err := s.InsertLateSession(testCtx(t), rec); err != nil {
				t.Fatal(err)
			}
			switch rng.IntN(3) {
			case 0:
				lcFinish(t, s, rng, rec, now)
			case 1:
				open = append(open, lcSim{rec: rec})
			default:
				rec.EndTime = now.Add(-time.Second)
				if err := s.MarkLeaked(testCtx(t), []quota.LeakedSession{{ResourceName: res, SessionID: rec.SessionID,
					EndTime: rec.EndTime}}); err != nil {
					t.Fatal(err)
				}
				leaked = append(leaked, lcSim{rec: rec})
			}
		}
		// Finishes and sweeps of open sessions.
		var still []lcSim
		for _, o := range open {
			switch {
			case now.Sub(o.rec.StartTime) > lease && rng.IntN(3) > 0:
				end := now.Add(-time.Duration(rng.Int64N(int64(time.Minute)))).Truncate(time.Millisecond)
				if err := s.MarkLeaked(testCtx(t), []quota.LeakedSession{{ResourceName: res, SessionID: o.rec.SessionID,
					EndTime: end}}); err != nil {
					t.Fatal(err)
				}
				o.rec.EndTime = end
				leaked = append(leaked, o)
			case rng.IntN(2) == 0:
				lcFinish(t, s, rng, o.rec, now)
			default:
				still = append(still, o)
			}
		}
		open = still
		// Late finishes of leaked sessions, within the retention only.
		var kept []lcSim
		for _, l := range leaked {
			if now.Before(l.rec.EndTime.Add(finishedRetention)) {
				if rng.IntN(10) == 0 {
					lcFinish(t, s, rng, l.rec, now)
					continue
				}
				kept = append(kept, l)
			}
		}
		leaked = kept
		// The job, most hours (an instance may miss some); the answers
		// checked after a third of them (the check is what takes time) and
		// at the end.
		if rng.IntN(4) > 0 {
			reps, err := job.Pass(testCtx(t))
			if err != nil || len(reps) > 0 && reps[0].Error != "" {
				t.Fatalf("pass at %s: %v %+v", now, err, reps)
			}
			lcCheckReachesTarget(t, s, res, now, cfg.ClosedPeriodsOnly)
			if rng.IntN(3) == 0 {
				lcCheckExact(t, s, res, now, cfg.ClosedPeriodsOnly)
			}
		}
	}
	lcCheckExact(t, s, res, now, cfg.ClosedPeriodsOnly)
	var w int64
	if err := s.db.GetContext(testCtx(t), &w, rolledToSQL, res); err != nil || w == 0 {
		t.Fatalf("watermark %d (%v): the job never rolled anything up", w, err)
	}
	t.Logf("seed %d: %d sessions, watermark %s at %s", seed, n, timeOf(w), now)
}

// lcFinish settles rec (USING or LEAKED) as a finish at now would.
func lcFinish(t *testing.T, s *Store, rng *rand.Rand, rec quota.UsageRecord, now time.Time) {
	t.Helper()
	used := rng.Int64N(rec.GrantedAmount + 3)
	rec.ChargedAmount, rec.RefundedAmount, rec.OverageAmount = used, max(rec.GrantedAmount-used, 0), max(used-rec.GrantedAmount, 0)
	rec.EndTime, rec.Status = now.Add(-time.Millisecond), quota.StatusFinished
	if err := s.FinishSession(testCtx(t), rec); err != nil {
		t.Fatal(err)
	}
}

// lcCheckReachesTarget checks that the pass at now left the watermark at
// its target (the hour an hour before now; with closedOnly, the current
// daily period's start if that is earlier), at an open (USING) session's
// start, or with no row between it and the target (a resource not
// visited): leaked and cancelled rows that may still change are passed,
// kept raw.
func lcCheckReachesTarget(t *testing.T, s *Store, res string, now time.Time, closedOnly bool) {
	t.Helper()
	target := now.Add(-time.Hour)
	if cur := now.Truncate(24 * time.Hour); closedOnly && cur.Before(target) {
		target = cur
	}
	target = target.Truncate(time.Hour)
	var w int64
	if err := s.db.GetContext(testCtx(t), &w, rolledToSQL, res); err != nil {
		t.Fatal(err)
	}
	if w == msOf(target) {
		return
	}
	var using, left int
	if err := s.db.GetContext(testCtx(t), &using, `SELECT COUNT(*) FROM quota_usage
		WHERE resource_name = ? AND start_ms = ? AND status = 'USING'`, res, w); err != nil {
		t.Fatal(err)
	}
	if err := s.db.GetContext(testCtx(t), &left, `SELECT COUNT(*) FROM quota_usage
		WHERE resource_name = ? AND start_ms >= ? AND start_ms < ?`, res, w, msOf(target)); err != nil {
		t.Fatal(err)
	}
	if w > msOf(target) || using == 0 && left > 0 {
		t.Fatalf("at %s the pass left the watermark at %s with %d rows before its target %s; want the target or an open session's start",
			now, timeOf(w), left, target)
	}
}

// lcCheckExact compares the lifecycle's reads with the raw rows' at now.
func lcCheckExact(t *testing.T, s *Store, res string, now time.Time, closedOnly bool) {
	t.Helper()
	end := now.Truncate(time.Hour).Add(time.Hour)
	var w int64
	if err := s.db.GetContext(testCtx(t), &w, rolledToSQL, res); err != nil {
		t.Fatal(err)
	}
	if closedOnly && w > msOf(now.Truncate(24*time.Hour)) || w > msOf(now.Add(-lifecycle.RecentRows)) {
		t.Fatalf("at %s the watermark %s is past its bound (closed periods only: %v)", now, timeOf(w), closedOnly)
	}
	var using int
	if err := s.db.GetContext(testCtx(t), &using, `SELECT COUNT(*) FROM quota_usage
		WHERE resource_name = ? AND start_ms < ? AND status = 'USING'
		AND id NOT IN (SELECT id FROM quota_usage_rollup_deferred WHERE resource_name = ?)`, res, w, res); err != nil || using != 0 {
		t.Fatalf("at %s: %d USING rows below the watermark %s not listed (%v)", now, using, timeOf(w), err)
	}
	cur := now.Truncate(24 * time.Hour)
	snap, _, err := s.SeedSnapshot(testCtx(t), res, cur)
	if err != nil {
		t.Fatal(err)
	}
	if want := rawPeriodTotals(t, s, res, cur); snap != want {
		t.Fatalf("at %s (watermark %s) the seed snapshot's totals %+v; raw rows %+v", now, timeOf(w), snap, want)
	}
	// The last 30 days, one starting inside the rolled-up range, and the
	// current and previous periods.
	windows := [][2]time.Time{{end.Add(-30 * 24 * time.Hour), end}, {lcBase.Add(5 * time.Hour), end},
		{cur, cur.Add(24 * time.Hour)}, {cur.Add(-24 * time.Hour), cur}}
	for _, g := range []string{quota.GroupByClient, quota.GroupByLine, quota.GroupByHour, quota.GroupByDay} {
		for _, win := range windows {
			q := quota.UsageQuery{Resource: res, From: win[0], To: win[1], GroupBy: g, MaxGroups: 1000}
			got, err := s.Usage(testCtx(t), q)
			if err != nil {
				t.Fatal(err)
			}
			if want := rawUsage(t, s, q); !reflect.DeepEqual(got, want) {
				t.Fatalf("at %s (watermark %s) usage by %s over %s-%s:\n got %+v\nwant %+v (raw rows)",
					now, timeOf(w), g, win[0], win[1], got, want)
			}
		}
	}
	for d := lcBase.Add(-24 * time.Hour); d.Before(end); d = d.Add(24 * time.Hour) {
		got, err := s.PeriodTotals(testCtx(t), res, d)
		if err != nil {
			t.Fatal(err)
		}
		if want := rawPeriodTotals(t, s, res, d); got != want {
			t.Fatalf("at %s (watermark %s) period %s totals %+v; raw rows %+v", now, timeOf(w), d, got, want)
		}
	}
}
