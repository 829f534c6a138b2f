package mysqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// chargeRec is one gateway charge row of amount on resource for client at
// period's start plus offset.
func chargeRec(id, resource, client string, amount, overage int64, offset time.Duration) quota.UsageRecord {
	at := period.Add(offset)
	return quota.UsageRecord{ResourceName: resource, ClientID: client, SessionID: id, PeriodStart: period,
		ApplyAmount: amount, GrantedAmount: amount, ChargedAmount: amount, OverageAmount: overage,
		StartTime: at, EndTime: at, Status: quota.StatusFinished}
}

// The rows of one group commit that share client, resource and period are
// one row: amounts summed, the first one's session id, the earliest start
// and the latest end; other rows stay as they are, in order of first
// appearance; sums past 2^53−1 start a new row.
func TestMergeChargesPerClientResourceAndPeriod(t *testing.T) {
	other := chargeRec("o-1", "gpu", "client-1", 4, 0, time.Minute)
	other.PeriodStart = period.Add(24 * time.Hour)
	groups := [][]quota.UsageRecord{
		{chargeRec("a-1", "gpu", "client-1", 2, 0, 3*time.Minute), chargeRec("a-2", "cpu", "client-1", 1, 0, 3*time.Minute)},
		{chargeRec("b-1", "gpu", "client-2", 5, 0, 2*time.Minute)},
		{chargeRec("c-1", "gpu", "client-1", 3, 1, time.Minute), chargeRec("c-2", "cpu", "client-1", 6, 0, 4*time.Minute)},
		{other},
		{chargeRec("d-1", "gpu", "client-1", quota.MaxAmount-5, 0, 5*time.Minute)},
		{chargeRec("e-1", "gpu", "client-1", 7, 2, 6*time.Minute)},
	}
	got := mergeCharges(groups)
	// a-1 takes c-1 (5 in all) and then d-1 (exactly 2^53−1 in all); e-1's 7
	// does not fit and starts a row of its own.
	want := []quota.UsageRecord{
		{ResourceName: "gpu", ClientID: "client-1", SessionID: "a-1", PeriodStart: period, ApplyAmount: quota.MaxAmount,
			GrantedAmount: quota.MaxAmount, ChargedAmount: quota.MaxAmount, OverageAmount: 1,
			StartTime: period.Add(time.Minute), EndTime: period.Add(5 * time.Minute), Status: quota.StatusFinished},
		{ResourceName: "cpu", ClientID: "client-1", SessionID: "a-2", PeriodStart: period, ApplyAmount: 7, GrantedAmount: 7,
			ChargedAmount: 7, StartTime: period.Add(3 * time.Minute), EndTime: period.Add(4 * time.Minute),
			Status: quota.StatusFinished},
		chargeRec("b-1", "gpu", "client-2", 5, 0, 2*time.Minute),
		other,
		chargeRec("e-1", "gpu", "client-1", 7, 2, 6*time.Minute),
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows %+v; want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row %d = %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// One group commit of concurrent gateway requests writes one row per
// client, resource and period, whose amounts are the requests' sums; the
// period totals (seeding, reconciliation) are what one row per request
// gave.
func TestInsertChargesOfOneGroupAreMergedAndSummed(t *testing.T) {
	const calls = 12
	forEachBackend(t, Options{BatchMaxRows: calls, BatchMaxWait: time.Minute}, func(t *testing.T, s *Store) {
		errs := make([]error, calls)
		var wg sync.WaitGroup
		var sum, overage int64
		for i := range calls {
			sum += int64(i + 1)
			overage += int64(i % 2)
			wg.Go(func() {
				recs := []quota.UsageRecord{chargeRec(fmt.Sprintf("g-%d", i), "gpu", "client-1", int64(i+1), int64(i%2), time.Duration(i)*time.Second)}
				if i%3 == 0 {
					recs = append(recs, chargeRec(fmt.Sprintf("g-%d-cpu", i), "cpu", "client-1", 10, 0, time.Duration(i)*time.Second))
				}
				errs[i] = s.InsertCharges(testCtx(t), recs)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("charge %d: %v", i, err)
			}
		}
		if got := countRows(t, s); got != 2 {
			t.Fatalf("%d rows; want 2 (gpu and cpu of client-1, one statement)", got)
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: sum})
		var over int64
		if err := s.DB().GetContext(testCtx(t), &over, `SELECT overage_amount FROM quota_usage WHERE resource_name = 'gpu'`); err != nil || over != overage {
			t.Fatalf("gpu overage %d (%v); want %d", over, err, overage)
		}
		cpu, err := s.PeriodTotals(testCtx(t), "cpu", period)
		if err != nil || cpu.Charged != 40 {
			t.Fatalf("cpu totals %+v %v; want 40 charged", cpu, err)
		}
		var start, end int64
		if err := s.DB().QueryRowContext(testCtx(t), `SELECT start_ms, end_ms FROM quota_usage WHERE resource_name = 'gpu'`).
			Scan(&start, &end); err != nil || start != msOf(period) || end != msOf(period.Add(11*time.Second)) {
			t.Fatalf("gpu row spans %d … %d (%v); want the first and the last request", start, end, err)
		}
	})
}

// A statement that broke without an answer is read back: the merged rows
// all there (as written) is success; a missing row, or a session id held
// by another row, is not.
func TestChargesWrittenReadsTheMergedRowsBack(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		a := chargeRec("w-1", "gpu", "client-1", 3, 0, time.Minute)
		b := chargeRec("w-2", "cpu", "client-1", 4, 0, time.Minute)
		if err := s.InsertCharges(testCtx(t), []quota.UsageRecord{a, b}); err != nil {
			t.Fatal(err)
		}
		if !s.chargesWritten([]quota.UsageRecord{a, b}) {
			t.Fatal("both rows are in the ledger: want written")
		}
		if s.chargesWritten([]quota.UsageRecord{a, chargeRec("w-3", "gpu", "client-1", 1, 0, time.Minute)}) {
			t.Fatal("w-3 is not in the ledger: want not written")
		}
		taken := a
		taken.ChargedAmount = 30
		if s.chargesWritten([]quota.UsageRecord{taken}) {
			t.Fatal("w-1 holds another amount: want not written")
		}
	})
}

// A statement that broke without an answer after its commit is success for
// every request of the group (their rows are read back as merged); one
// that broke before is the failure, and one the server refused is not read
// back.
func TestChargeRowsReadBackAStatementThatBrokeWithoutAnAnswer(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		groups := func(p string) [][]quota.UsageRecord {
			return [][]quota.UsageRecord{
				{chargeRec(p+"-1", "gpu", "client-1", 2, 0, time.Minute)},
				{chargeRec(p+"-2", "gpu", "client-1", 3, 0, 2*time.Minute), chargeRec(p+"-3", "cpu", "client-1", 1, 0, 2*time.Minute)},
			}
		}
		committed := func(ctx context.Context, n int, args []any) error {
			if err := s.chargeStmts.exec(ctx, nil, n, args); err != nil {
				return err
			}
			return fmt.Errorf("after the commit: %w", driver.ErrBadConn)
		}
		if err := s.writeCharges(testCtx(t), groups("after"), committed); err != nil {
			t.Fatalf("committed, then the connection broke: %v; want success (read back)", err)
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: 5})
		lost := func(context.Context, int, []any) error { return fmt.Errorf("before the commit: %w", driver.ErrBadConn) }
		if err := s.writeCharges(testCtx(t), groups("before"), lost); !errors.Is(err, driver.ErrBadConn) {
			t.Fatalf("broke before the commit: %v; want the connection's error", err)
		}
		refused := errors.New("refused by the server")
		if err := s.writeCharges(testCtx(t), groups("after"), func(context.Context, int, []any) error { return refused }); !errors.Is(err, refused) {
			t.Fatalf("a refusal: %v; want it as it is, even with the rows there", err)
		}
		mustTotals(t, s, quota.PeriodTotals{Charged: 5})
	})
}
