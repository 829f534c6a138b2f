package mysqlstore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPeriodTotalsOfARolledUpPeriodStartAtTheWatermark holds migration
// 00010 (issue 23 §2 (b)): the period totals of a period the lifecycle has
// rolled up in part, whose rows are still kept, read the period's rows from
// the watermark on as a range of idx_quota_usage_period (resource_name,
// period_start_ms, start_ms), not every row of the period. At 28 M rows
// the two-column index made the optimizer read all 83,334 rows of such a
// period to keep none (docs/performance.md). On MariaDB the test counts
// the index entries the statement reads (Handler_read_next); on both
// backends it checks the plan names the index with its third column.
func TestPeriodTotalsOfARolledUpPeriodStartAtTheWatermark(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("pi-%d", time.Now().UnixNano())
		// Two daily periods of 400 settled rows each, a minute apart.
		var rows []lcRow
		for d := range 2 {
			for i := range 400 {
				start := lcBase.Add(time.Duration(d)*24*time.Hour + time.Duration(i)*time.Minute)
				rows = append(rows, lcRow{start: start, end: start.Add(time.Second), status: "FINISHED",
					client: "a", granted: 10, charged: 7, refund: 3})
			}
		}
		lcInsert(t, s, res, rows)
		before, err := s.PeriodTotals(testCtx(t), res, lcBase)
		if err != nil {
			t.Fatal(err)
		}
		// Roll the first 300 rows of the first period up: 100 stay above
		// the watermark in that period.
		w := lcBase.Add(300 * time.Minute)
		if _, st := lcRollup(t, s, res, w, w.Add(time.Hour), 1000); !st.Done {
			t.Fatalf("rollup to %s: %+v", w, st)
		}
		got, err := s.PeriodTotals(testCtx(t), res, lcBase)
		if err != nil || got != before || got.Charged != 400*7 {
			t.Fatalf("period totals after the rollup %+v, %v; before %+v (want charged %d)", got, err, before, 400*7)
		}
		if s.dialect.name == "mysql" {
			if _, err := s.db.ExecContext(testCtx(t), `ANALYZE TABLE quota_usage`); err != nil {
				t.Fatal(err)
			}
		}
		args := periodTotalsArgs(res, lcBase)
		plan := explain(t, s, s.periodTotalsSQL(), args)
		t.Logf("period totals plan on %s:\n%s", s.dialect.name, plan)
		if !strings.Contains(plan, "idx_quota_usage_period") {
			t.Fatalf("the plan does not use idx_quota_usage_period:\n%s", plan)
		}
		if s.dialect.name == "sqlite" {
			if !strings.Contains(plan, "start_ms>?") {
				t.Fatalf("the plan does not range over start_ms:\n%s", plan)
			}
			return
		}
		// MariaDB: count the index entries the statement reads.
		conn, err := s.db.Connx(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(testCtx(t), `FLUSH STATUS`); err != nil {
			t.Fatal(err)
		}
		var tot struct {
			Reserved int64 `db:"reserved"`
			Charged  int64 `db:"charged"`
		}
		if err := conn.GetContext(testCtx(t), &tot, s.periodTotalsSQL(), args...); err != nil || tot.Charged != 400*7 {
			t.Fatalf("period totals %+v, %v", tot, err)
		}
		var name string
		var next int64
		if err := conn.QueryRowxContext(testCtx(t), `SHOW SESSION STATUS LIKE 'Handler_read_next'`).Scan(&name, &next); err != nil {
			t.Fatal(err)
		}
		if next > 110 {
			t.Fatalf("the period totals read %d index entries; want about the 100 rows above the watermark", next)
		}
	})
}
