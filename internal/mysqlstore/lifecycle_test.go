package mysqlstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/quota"
)

// lcBase is the first day of the lifecycle tests' ledgers (UTC midnight).
var lcBase = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

// lcRow is one ledger row written by lcLedger.
type lcRow struct {
	start, end               time.Time
	status                   string
	client, line             string
	granted, charged, refund int64
	overage                  int64
	recovered                bool
}

// lcLedger writes n settled rows of res over three days (daily periods,
// 0:00 UTC; several rows in one millisecond), of three clients and two
// lines, FINISHED (some with overage), LEAKED, leak-recovered and
// CANCELLED, each ended 10 minutes after its start, and returns them.
func lcLedger(t *testing.T, s *Store, res string, n int, seed uint64) []lcRow {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	rows := make([]lcRow, n)
	for i := range rows {
		start := lcBase.Add(time.Duration(rng.Int64N(int64(72 * time.Hour))).Truncate(time.Millisecond))
		if i%10 == 1 {
			start = rows[i-1].start // a tie
		}
		g := 1 + rng.Int64N(100)
		r := lcRow{start: start, end: start.Add(10 * time.Minute), status: "FINISHED",
			client: []string{"a", "b", "c"}[rng.IntN(3)], line: []string{"", "x"}[rng.IntN(2)], granted: g}
		switch rng.IntN(6) {
		case 0:
			r.status, r.charged = "LEAKED", g
		case 1:
			r.status, r.charged = "CANCELLED", 0
			r.refund = g
		case 2:
			r.charged, r.overage, r.recovered = g+5, 5, true
		default:
			r.charged = rng.Int64N(g + 1)
			r.refund = g - r.charged
		}
		rows[i] = r
	}
	lcInsert(t, s, res, rows)
	return rows
}

// lcInsert writes rows of res.
func lcInsert(t *testing.T, s *Store, res string, rows []lcRow) {
	t.Helper()
	for i := 0; i < len(rows); i += 200 {
		var b strings.Builder
		var args []any
		for j, r := range rows[i:min(i+200, len(rows))] {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			start, day := r.start.UnixMilli(), int64(86400000)
			var end any
			if !r.end.IsZero() {
				end = r.end.UnixMilli()
			}
			args = append(args, res, r.client, fmt.Sprintf("%s-%d-%d-%d", res, start, i+j, time.Now().UnixNano()),
				start-start%day, r.granted, r.charged, r.refund, r.overage, start, end, r.status, r.recovered, r.line)
		}
		if _, err := s.db.ExecContext(testCtx(t), `INSERT INTO quota_usage
			(resource_name, client_id, session_id, period_start_ms, granted_amount, charged_amount, refunded_amount,
			 overage_amount, start_ms, end_ms, status, leak_recovered, business_line) VALUES `+b.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
}

// lcView is everything the lifecycle must keep: usage in every grouping
// over whole hours and days, and each period's totals.
func lcView(t *testing.T, s *Store, res string) map[string]any {
	t.Helper()
	view := map[string]any{}
	ranges := [][2]time.Time{
		{lcBase, lcBase.Add(72 * time.Hour)},
		{lcBase.Add(5 * time.Hour), lcBase.Add(30 * time.Hour)},
		{lcBase.Add(47 * time.Hour), lcBase.Add(49 * time.Hour)},
	}
	for _, g := range []string{quota.GroupByClient, quota.GroupByLine, quota.GroupByHour, quota.GroupByDay} {
		for _, r := range ranges {
			u, err := s.Usage(testCtx(t), quota.UsageQuery{Resource: res, From: r[0], To: r[1], GroupBy: g, MaxGroups: 1000})
			if err != nil {
				t.Fatal(err)
			}
			view[fmt.Sprintf("%s %s-%s", g, r[0].Format(time.RFC3339), r[1].Format(time.RFC3339))] = u
		}
	}
	// A cut answer stays exact (mergeUsage).
	u, err := s.Usage(testCtx(t), quota.UsageQuery{Resource: res, From: lcBase, To: lcBase.Add(72 * time.Hour),
		GroupBy: quota.GroupByHour, MaxGroups: 30})
	if err != nil {
		t.Fatal(err)
	}
	view["hour cut at 30"] = u
	for d := range 4 {
		tot, err := s.PeriodTotals(testCtx(t), res, lcBase.Add(time.Duration(d)*24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		view[fmt.Sprintf("period %d", d)] = tot
		stot, _, err := s.SeedSnapshot(testCtx(t), res, lcBase.Add(time.Duration(d)*24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		view[fmt.Sprintf("seed period %d", d)] = stot
	}
	return view
}

// lcRollup runs RollupStep until it is done or blocked and returns the
// rows it summed and the last step.
func lcRollup(t *testing.T, s *Store, res string, target, settled time.Time, batch int) (int64, lifecycle.RollupStep) {
	t.Helper()
	var rows int64
	for range 10000 {
		st, err := s.RollupStep(testCtx(t), res, target, settled, batch)
		if err != nil {
			t.Fatal(err)
		}
		rows += st.Rows
		if st.Done || st.Blocked {
			return rows, st
		}
	}
	t.Fatal("rollup never finished")
	return 0, lifecycle.RollupStep{}
}

// lcDelete runs DeleteStep until done and returns the rows deleted.
func lcDelete(t *testing.T, s *Store, res string, before time.Time, batch int) int64 {
	t.Helper()
	var rows int64
	for range 10000 {
		st, err := s.DeleteStep(testCtx(t), res, before, batch)
		if err != nil {
			t.Fatal(err)
		}
		if st.Rows > int64(batch)+20 { // a millisecond's rows are taken whole; lcLedger ties are pairs
			t.Fatalf("a delete step took %d rows, batch %d", st.Rows, batch)
		}
		rows += st.Rows
		if st.Done {
			return rows
		}
	}
	t.Fatal("delete never finished")
	return 0
}

func lcCount(t *testing.T, s *Store, res string) int64 {
	t.Helper()
	var n int64
	if err := s.db.GetContext(testCtx(t), &n, `SELECT COUNT(*) FROM quota_usage WHERE resource_name = ?`, res); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLifecycleKeepsUsageAndPeriodTotals(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("lc-%d", time.Now().UnixNano())
		rows := lcLedger(t, s, res, 600, 1)
		before := lcView(t, s, res)
		target, settled := lcBase.Add(72*time.Hour), lcBase.Add(80*time.Hour)

		pv, err := s.Preview(testCtx(t), res, target, settled, target)
		if err != nil {
			t.Fatal(err)
		}
		n, last := lcRollup(t, s, res, target, settled, 37)
		if n != int64(len(rows)) || !last.Done || last.Blocked || !last.RolledTo.Equal(target) {
			t.Fatalf("rolled up %d rows (want %d), last step %+v", n, len(rows), last)
		}
		if pv.RowsToRollUp != n || pv.RowsToDelete != n || pv.Blocked || !pv.RollupTo.Equal(target) {
			t.Fatalf("preview %+v, then rolled up %d", pv, n)
		}
		if again, st := lcRollup(t, s, res, target, settled, 37); again != 0 || !st.Done {
			t.Fatalf("a second rollup summed %d rows (%+v); want none", again, st)
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, before) {
			t.Fatalf("after the rollup the answers changed:\n got %+v\nwant %+v", got, before)
		}
		if d := lcDelete(t, s, res, target, 50); d != int64(len(rows)) || lcCount(t, s, res) != 0 {
			t.Fatalf("deleted %d of %d rows, %d left", d, len(rows), lcCount(t, s, res))
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, before) {
			t.Fatalf("after the deletion the answers changed:\n got %+v\nwant %+v", got, before)
		}
		// In the rolled-up range a bound inside an hour takes the whole hour.
		u, err := s.Usage(testCtx(t), quota.UsageQuery{Resource: res, From: lcBase.Add(5*time.Hour + 30*time.Minute),
			To: lcBase.Add(6*time.Hour + 10*time.Minute), GroupBy: quota.GroupByHour, MaxGroups: 1000})
		if err != nil {
			t.Fatal(err)
		}
		whole, _ := s.Usage(testCtx(t), quota.UsageQuery{Resource: res, From: lcBase.Add(5 * time.Hour),
			To: lcBase.Add(7 * time.Hour), GroupBy: quota.GroupByHour, MaxGroups: 1000})
		if !reflect.DeepEqual(u, whole) || len(u.Groups) != 2 {
			t.Fatalf("5:30-6:10 by hour = %+v; want the hours 5 and 6 whole, %+v", u, whole)
		}
	})
}

// TestLifecycleWaitsForOpenSessions: an open (USING) session's row stops
// the rollup until it is settled; a leaked row settled after the bound is
// passed and kept raw (TestLifecycleRollsUpPastRowsThatMayStillChange).
func TestLifecycleWaitsForOpenSessions(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("lcb-%d", time.Now().UnixNano())
		rows := lcLedger(t, s, res, 300, 2)
		open := lcRow{start: lcBase.Add(30 * time.Hour), status: "USING", client: "a", granted: 9, charged: 9}
		late := lcRow{start: lcBase.Add(50 * time.Hour), end: lcBase.Add(79 * time.Hour), status: "LEAKED", client: "b", granted: 4, charged: 4}
		lcInsert(t, s, res, []lcRow{open, late})
		before := lcView(t, s, res)
		target, settled := lcBase.Add(72*time.Hour), lcBase.Add(78*time.Hour)
		n, st := lcRollup(t, s, res, target, settled, 40)
		if !st.Blocked || !st.RolledTo.Equal(open.start) {
			t.Fatalf("rollup stopped at %+v; want blocked at the USING row's start %s", st, open.start)
		}
		want := int64(0)
		for _, r := range rows {
			if r.start.Before(open.start) {
				want++
			}
		}
		if n != want {
			t.Fatalf("rolled up %d rows; want the %d before the USING row", n, want)
		}
		lcDelete(t, s, res, target, 25)
		if lcCount(t, s, res) != int64(len(rows)+2)-want {
			t.Fatalf("%d rows left; want %d (the rows from the USING one on)", lcCount(t, s, res), int64(len(rows)+2)-want)
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, before) {
			t.Fatalf("answers changed:\n got %+v\nwant %+v", got, before)
		}
		// The session finishes: the rollup passes the leaked row settled
		// after the bound (it may still change: kept raw, listed) and
		// reaches its target.
		if _, err := s.db.ExecContext(testCtx(t), `UPDATE quota_usage SET status = 'FINISHED', charged_amount = 3,
			refunded_amount = 6, end_ms = ? WHERE resource_name = ? AND status = 'USING'`,
			lcBase.Add(31*time.Hour).UnixMilli(), res); err != nil {
			t.Fatal(err)
		}
		after := lcView(t, s, res)
		if _, st = lcRollup(t, s, res, target, settled, 40); !st.Done || st.Blocked {
			t.Fatalf("rollup stopped at %+v; want done, past the late-settled row at %s", st, late.start)
		}
		if len(lcListed(t, s, res)) != 1 {
			t.Fatalf("listed %v; want the late-settled row", lcListed(t, s, res))
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, after) {
			t.Fatalf("answers changed:\n got %+v\nwant %+v", got, after)
		}
		// Later the bound passes it and it is summed.
		if n, st = lcRollup(t, s, res, target, lcBase.Add(80*time.Hour), 40); !st.Done || n != 1 || len(lcListed(t, s, res)) != 0 {
			t.Fatalf("rollup summed %d, stopped at %+v, listed %v; want the late row summed", n, st, lcListed(t, s, res))
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, after) {
			t.Fatalf("answers changed:\n got %+v\nwant %+v", got, after)
		}
	})
}

func TestLifecycleTwoInstancesSumOnce(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("lc2-%d", time.Now().UnixNano())
		rows := lcLedger(t, s, res, 800, 3)
		before := lcView(t, s, res)
		target, settled := lcBase.Add(72*time.Hour), lcBase.Add(80*time.Hour)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var total int64
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 1000 {
					st, err := s.RollupStep(testCtx(t), res, target, settled, 23)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					total += st.Rows
					mu.Unlock()
					if st.Done {
						return
					}
				}
			}()
		}
		wg.Wait()
		if total != int64(len(rows)) {
			t.Fatalf("three instances summed %d rows; want each of the %d once", total, len(rows))
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, before) {
			t.Fatalf("answers changed:\n got %+v\nwant %+v", got, before)
		}
	})
}

func TestLifecycleStepCutShortCommitsNothing(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("lcx-%d", time.Now().UnixNano())
		lcLedger(t, s, res, 100, 4)
		before := lcView(t, s, res)
		ctx, cancel := context.WithCancel(testCtx(t))
		cancel()
		target, settled := lcBase.Add(72*time.Hour), lcBase.Add(80*time.Hour)
		if _, err := s.RollupStep(ctx, res, target, settled, 1000); err == nil {
			t.Fatal("a rollup step with a cancelled context succeeded")
		}
		if _, err := s.DeleteStep(ctx, res, target, 1000); err == nil {
			t.Fatal("a delete step with a cancelled context succeeded")
		}
		var w int64
		if err := s.db.GetContext(testCtx(t), &w, rolledToSQL, res); err != nil || w != 0 {
			t.Fatalf("watermark %d (%v); want 0", w, err)
		}
		if got := lcView(t, s, res); !reflect.DeepEqual(got, before) || lcCount(t, s, res) != 100 {
			t.Fatalf("a failed step changed the ledger: %d rows", lcCount(t, s, res))
		}
	})
}
