package mysqlstore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPeriodTotalsReadThePeriodFromTheWatermarkOnly holds the period
// totals' plan on MariaDB at a period size where the optimizer estimates
// its ranges instead of counting them (issue 23 §2): the totals read a
// period's rows as a range of idx_quota_usage_period (resource_name,
// period_start_ms, start_ms) from the lifecycle watermark, whatever the
// estimates. Without the index hint (store.go, periodIndex) MariaDB 10.11
// took `ref` on a prefix of an index with the range's estimate: on
// (resource_name, period_start_ms), reading a period rolled up partway
// whole (this test: 10,000 rows for 5,000), and on a 10 M-row ledger
// idx_quota_usage_start on resource_name alone, reading every row the
// resource keeps for the current period's totals (1,000,000 rows for
// 72,917, 24 s; past the one-minute timeout at 60 M rows;
// docs/performance.md); the rollups and the list it read by the
// resource_name prefix of their primary keys. The test counts the index
// entries each statement reads (Handler_read_next) and checks the plan and
// the totals.
func TestPeriodTotalsReadThePeriodFromTheWatermarkOnly(t *testing.T) {
	s := MustMySQL(t)
	res := fmt.Sprintf("pp-%d", time.Now().UnixNano())
	const perDay = 10000
	day := 24 * time.Hour
	// Three daily periods of settled rows, 8.64 s apart; the 5,000th row
	// of the second period is still open and holds the watermark there.
	var rows []lcRow
	for d := range 3 {
		for i := range perDay {
			start := lcBase.Add(time.Duration(d)*day + time.Duration(i)*day/perDay)
			r := lcRow{start: start, end: start.Add(time.Second), status: "FINISHED", client: "a",
				granted: 10, charged: 7, refund: 3}
			if d == 1 && i == perDay/2 {
				r.end, r.status, r.charged, r.refund = time.Time{}, "USING", 10, 0
			}
			rows = append(rows, r)
		}
	}
	lcInsert(t, s, res, rows)
	current := lcBase.Add(2 * day)
	open := rows[perDay+perDay/2].start
	if _, st := lcRollup(t, s, res, current, current, 5000); !st.Blocked || !st.RolledTo.Equal(open) {
		t.Fatalf("rollup to %s: %+v; want it blocked at the open row's start %s", current, st, open)
	}
	if _, err := s.db.ExecContext(testCtx(t), `ANALYZE TABLE quota_usage`); err != nil {
		t.Fatal(err)
	}
	// The second period, rolled up to its middle: its last 5,000 rows (the
	// open one among them) are read raw.
	assertPeriodTotalsRead(t, s, res, lcBase.Add(day), perDay/2, 10, (perDay-1)*7)
	// Settle the open row, roll up to the current period's start: the
	// current period's totals read its 10,000 rows, none before.
	if _, err := s.db.ExecContext(testCtx(t), `UPDATE quota_usage SET status = 'FINISHED', charged_amount = 7,
		refunded_amount = 3, end_ms = start_ms + 1000 WHERE resource_name = ? AND status = 'USING'`, res); err != nil {
		t.Fatal(err)
	}
	if _, st := lcRollup(t, s, res, current, current, 5000); !st.Done {
		t.Fatalf("rollup to %s: %+v", current, st)
	}
	if _, err := s.db.ExecContext(testCtx(t), `ANALYZE TABLE quota_usage`); err != nil {
		t.Fatal(err)
	}
	assertPeriodTotalsRead(t, s, res, current, perDay, 0, perDay*7)
}

// assertPeriodTotalsRead checks that the period totals of res at period
// read at most rawRows index entries (and a few of the rollups and the
// list) as a range of idx_quota_usage_period, and sum to reserved and
// charged.
func assertPeriodTotalsRead(t *testing.T, s *Store, res string, period time.Time, rawRows int, reserved, charged int64) {
	t.Helper()
	args := periodTotalsArgs(res, period)
	q := s.periodTotalsSQL()
	plan := explain(t, s, q, args)
	first := strings.SplitN(plan, "\n", 2)[0]
	if !strings.Contains(first, "table=quota_usage ") || !strings.Contains(first, "type=range ") ||
		!strings.Contains(first, "key=idx_quota_usage_period ") {
		t.Errorf("period %s: the ledger's rows are not read as a range of idx_quota_usage_period:\n%s", period, plan)
	}
	// The rollups and the list by their period indexes, not by the
	// resource_name prefix of their primary keys (every rollup row or
	// listed row of the resource).
	for _, line := range strings.Split(plan, "\n") {
		if strings.HasPrefix(line, "table=quota_usage_rollup ") && !strings.Contains(line, "key=idx_quota_usage_rollup_period ") ||
			strings.HasPrefix(line, "table=d ") && !strings.Contains(line, "key=idx_quota_usage_rollup_deferred_period ") {
			t.Errorf("period %s: %s; want the table's period index:\n%s", period, line, plan)
		}
	}
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
	if err := conn.GetContext(testCtx(t), &tot, q, args...); err != nil {
		t.Fatal(err)
	}
	if tot.Reserved != reserved || tot.Charged != charged {
		t.Errorf("period %s: reserved %d charged %d; want %d, %d", period, tot.Reserved, tot.Charged, reserved, charged)
	}
	var name string
	var next int64
	if err := conn.QueryRowxContext(testCtx(t), `SHOW SESSION STATUS LIKE 'Handler_read_next'`).Scan(&name, &next); err != nil {
		t.Fatal(err)
	}
	if next > int64(rawRows)+100 {
		t.Errorf("period %s: the totals read %d index entries; want about the %d rows from the watermark on; plan:\n%s",
			period, next, rawRows, plan)
	}
}
