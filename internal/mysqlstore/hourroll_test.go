package mysqlstore

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	qcperiod "github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// TestALateRowBelowTheWatermarkIsListedAndCountedOnce: a row written with a
// start hours old (a fail-open session that reconciliation
// records once MySQL answers again, internal/reconcile failopen.go) may
// land below the lifecycle's watermark, which since the hourly rollup of
// the current period is an hour or two behind now. It is listed in
// quota_usage_rollup_deferred, so the period totals (a rebuild's), the
// seed snapshot and GET /admin/usage count it, open (reserved) then
// settled, and a later pass sums it once (InsertLateSession). On main such a row was in no
// reader's range: the rebuild's totals lost its grant.
func TestALateRowBelowTheWatermarkIsListedAndCountedOnce(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("late-%d", time.Now().UnixNano())
		period := lcBase
		var rows []lcRow
		for i := range 120 { // 10 hours of the current period, one row every 5 minutes
			start := period.Add(time.Duration(i) * 5 * time.Minute)
			rows = append(rows, lcRow{start: start, end: start.Add(time.Second), status: "FINISHED",
				client: "a", granted: 10, charged: 7, refund: 3})
		}
		lcInsert(t, s, res, rows)
		w := period.Add(8 * time.Hour)
		if _, st := lcRollup(t, s, res, w, w, 1000); !st.Done {
			t.Fatalf("rollup to %s: %+v", w, st)
		}
		// The late session started at 03:02:30, below the watermark (08:00);
		// another at 09:00, above it.
		rec := quota.UsageRecord{ResourceName: res, ClientID: "fo", SessionID: res + "-late", PeriodStart: period,
			ApplyAmount: 50, GrantedAmount: 50, ChargedAmount: 50, StartTime: period.Add(3*time.Hour + 150*time.Second), Status: quota.StatusUsing}
		above := rec
		above.SessionID, above.StartTime = res+"-above", period.Add(9*time.Hour+150*time.Second)
		for _, r := range []quota.UsageRecord{rec, above} {
			if err := s.InsertLateSession(testCtx(t), r); err != nil {
				t.Fatal(err)
			}
		}
		check := func(when string, wantReserved int64) {
			t.Helper()
			got, err := s.PeriodTotals(testCtx(t), res, period)
			if err != nil {
				t.Fatal(err)
			}
			if want := rawPeriodTotals(t, s, res, period); got != want || got.Reserved != wantReserved {
				t.Fatalf("%s: period totals %+v; raw rows %+v, want reserved %d", when, got, want, wantReserved)
			}
			snap, open, err := s.SeedSnapshot(testCtx(t), res, period)
			if err != nil || snap != got {
				t.Fatalf("%s: seed snapshot totals %+v (%v); period totals %+v", when, snap, err, got)
			}
			if wantOpen := int(wantReserved / 50); len(open) != wantOpen {
				t.Fatalf("%s: %d open sessions in the snapshot; want %d", when, len(open), wantOpen)
			}
			for _, g := range []string{quota.GroupByClient, quota.GroupByHour} {
				q := quota.UsageQuery{Resource: res, From: period, To: period.Add(24 * time.Hour), GroupBy: g, MaxGroups: 100}
				u, err := s.Usage(testCtx(t), q)
				if err != nil {
					t.Fatal(err)
				}
				if want := rawUsage(t, s, q); !reflect.DeepEqual(u, want) {
					t.Fatalf("%s: usage by %s\n got %+v\nwant %+v (raw rows)", when, g, u, want)
				}
			}
		}
		check("open", 100)
		lateID, _ := lcRowAt(t, s, res, rec.StartTime)
		if got := lcListed(t, s, res); !slices.Equal(got, []int64{lateID}) {
			t.Fatalf("listed %v; want the late row %d only (the other is above the watermark)", got, lateID)
		}
		if err := s.InsertLateSession(testCtx(t), rec); !errors.Is(err, quota.ErrDuplicateSession) {
			t.Fatalf("the late session again: %v; want ErrDuplicateSession", err)
		}
		// A pass while it is open keeps it listed and sums nothing twice.
		if n, st := lcRollup(t, s, res, w, w, 1000); n != 0 || !st.Done {
			t.Fatalf("a pass with the late row open summed %d (%+v)", n, st)
		}
		check("open, after a pass", 100)
		fin := rec
		fin.Status, fin.ChargedAmount, fin.RefundedAmount, fin.EndTime = quota.StatusFinished, 20, 30, period.Add(10*time.Hour)
		if err := s.FinishSession(testCtx(t), fin); err != nil {
			t.Fatal(err)
		}
		check("finished", 50)
		if n, st := lcRollup(t, s, res, w, w, 1000); n != 1 || !st.Done || len(lcListed(t, s, res)) != 0 {
			t.Fatalf("the pass after the finish summed %d (%+v), listed %v; want the late row summed once", n, st, lcListed(t, s, res))
		}
		check("summed", 50)
		before, _ := s.PeriodTotals(testCtx(t), res, period)
		if n := lcDelete(t, s, res, w, 1000); n != 97 { // 96 rows before 08:00 and the late one
			t.Fatalf("deleted %d rows; want 97", n)
		}
		if after, err := s.PeriodTotals(testCtx(t), res, period); err != nil || after != before {
			t.Fatalf("after the deletion the totals %+v (%v); before %+v", after, err, before)
		}
	})
}

// TestCurrentPeriodTotalsReadTheLastHoursOnly (issue 23 §2, the cold
// current-period totals at 100 M rows): after a pass of the lifecycle job
// at 20:10, a daily period's totals read its rows from 19:00 on raw (the
// watermark is the hour before now − RecentRows) and the rest through the
// rollups. On main the job stopped at the period's start and the totals
// read all 1,200 raw rows of the period (MariaDB: Handler_read_next).
// The answer is the same as the raw rows', before and after the pass.
func TestCurrentPeriodTotalsReadTheLastHoursOnly(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("hr-%d", time.Now().UnixNano())
		period := lcBase.Add(24 * time.Hour)
		pol := quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 1 << 40, ResetCron: "0 0 * * *",
			Timezone: "UTC", LeakThresholdSeconds: 300, CreatedAt: lcBase, UpdatedAt: lcBase}
		if _, _, err := s.PutPolicy(testCtx(t), pol); err != nil {
			t.Fatal(err)
		}
		now := period.Add(20*time.Hour + 10*time.Minute)
		// 60 rows an hour from 00:00 to 20:00, FINISHED; the last hour's
		// 20 USING (open sessions).
		var rows []lcRow
		for i := range 1200 {
			start := period.Add(time.Duration(i) * time.Minute)
			r := lcRow{start: start, end: start.Add(time.Second), status: "FINISHED", client: fmt.Sprint("c", i%5),
				granted: 10, charged: 7, refund: 3}
			if start.After(now.Add(-30 * time.Minute)) {
				r.status, r.end, r.charged, r.refund = "USING", time.Time{}, 10, 0
			}
			rows = append(rows, r)
		}
		lcInsert(t, s, res, rows)
		want := rawPeriodTotals(t, s, res, period)
		cfg := lifecycle.Defaults()
		cfg.Pause, cfg.Now = 0, func() time.Time { return now }
		reps, err := lifecycle.New(cfg, s, s, &qcperiod.Scheduler{}, zap.NewNop(), nil).Pass(testCtx(t))
		if err != nil || len(reps) != 1 || reps[0].Error != "" {
			t.Fatalf("pass: %v %+v", err, reps)
		}
		if w := period.Add(19 * time.Hour); !reps[0].RolledTo.Equal(w) || reps[0].RowsRolled != 19*60 {
			t.Fatalf("pass %+v; want 1,140 rows rolled up to %s", reps[0], w)
		}
		got, err := s.PeriodTotals(testCtx(t), res, period)
		if err != nil || got != want {
			t.Fatalf("period totals after the pass %+v (%v); before %+v", got, err, want)
		}
		if s.dialect.name != "mysql" {
			return
		}
		if _, err := s.db.ExecContext(testCtx(t), `ANALYZE TABLE quota_usage`); err != nil {
			t.Fatal(err)
		}
		if next := handlerReadNext(t, s, s.periodTotalsSQL(), periodTotalsArgs(res, period)); next > 60+100 {
			t.Fatalf("the current period's totals read %d index entries; want the last hour's 60 (+ the rollups' few)", next)
		}
	})
}

// handlerReadNext runs query on one connection and returns the index
// entries it read (MariaDB's session Handler_read_next).
func handlerReadNext(t *testing.T, s *Store, query string, args []any) int64 {
	t.Helper()
	conn, err := s.db.Connx(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(testCtx(t), `FLUSH STATUS`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(testCtx(t), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	var name string
	var next int64
	if err := conn.QueryRowxContext(testCtx(t), `SHOW SESSION STATUS LIKE 'Handler_read_next'`).Scan(&name, &next); err != nil {
		t.Fatal(err)
	}
	return next
}
