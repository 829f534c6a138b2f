package mysqlstore

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// CancelSession marks only the USING row of the attempt it names (resource,
// start, grant, period), with nothing charged; PeriodTotals and the open
// sessions then leave it out. A missing row is no error.
func TestCancelSessionMarksOnlyItsAttemptsRow(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		rec := usingRec("c-1", 40)
		if err := s.InsertSession(ctx, rec); err != nil {
			t.Fatal(err)
		}
		end := rec.StartTime.Add(time.Second)
		for name, other := range map[string]func(r quota.UsageRecord) quota.UsageRecord{
			"another start":    func(r quota.UsageRecord) quota.UsageRecord { r.StartTime = r.StartTime.Add(time.Millisecond); return r },
			"another grant":    func(r quota.UsageRecord) quota.UsageRecord { r.GrantedAmount++; return r },
			"another resource": func(r quota.UsageRecord) quota.UsageRecord { r.ResourceName = "cpu"; return r },
			"another period":   func(r quota.UsageRecord) quota.UsageRecord { r.PeriodStart = r.PeriodStart.Add(time.Hour); return r },
			"no such row":      func(r quota.UsageRecord) quota.UsageRecord { r.SessionID = "c-none"; return r },
		} {
			o := other(rec)
			o.EndTime = end
			if err := s.CancelSession(ctx, o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if row, _ := s.Session(ctx, "c-1"); row.Status != quota.StatusUsing {
				t.Fatalf("%s: the row became %s", name, row.Status)
			}
		}
		rec.EndTime = end
		for range 2 { // idempotent
			if err := s.CancelSession(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		row, err := s.Session(ctx, "c-1")
		if err != nil || row.Status != quota.StatusCancelled || row.ChargedAmount != 0 || row.RefundedAmount != 40 ||
			row.GrantedAmount != 40 || !row.EndTime.Equal(end) {
			t.Fatalf("cancelled row %+v, %v", row, err)
		}
		tot, err := s.PeriodTotals(ctx, "gpu", period)
		if err != nil || tot != (quota.PeriodTotals{}) {
			t.Fatalf("period totals with only a CANCELLED row: %+v, %v", tot, err)
		}
		if open, _, err := s.OpenSessionsPage(ctx, "gpu", 0, 10); err != nil || len(open) != 0 {
			t.Fatalf("open sessions: %+v, %v", open, err)
		}
		// A FINISHED row is never cancelled.
		f := usingRec("c-2", 10)
		if err := s.InsertSession(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishSession(ctx, finishRec("c-2", 10, 0, 0, end)); err != nil {
			t.Fatal(err)
		}
		f.EndTime = end
		if err := s.CancelSession(ctx, f); err != nil {
			t.Fatal(err)
		}
		if row, _ := s.Session(ctx, "c-2"); row.Status != quota.StatusFinished || row.ChargedAmount != 10 {
			t.Fatalf("a FINISHED row after CancelSession: %+v", row)
		}
	})
}

// ReviveSession makes a CANCELLED row (or a USING one of the same apply,
// grant and period) the retry's: USING with its period, grant and start;
// after it the earlier attempt's CancelSession no longer matches. Rows of
// another apply, FINISHED and LEAKED rows are left alone.
func TestReviveSessionFencesTheEarlierAttempt(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		first := usingRec("v-1", 40)
		if err := s.InsertSession(ctx, first); err != nil {
			t.Fatal(err)
		}
		// The retry adopts the USING row before the first attempt's mark.
		retry := first
		retry.StartTime = first.StartTime.Add(3 * time.Second)
		if ok, err := s.ReviveSession(ctx, retry); err != nil || !ok {
			t.Fatalf("adopt a USING row: %v %v", ok, err)
		}
		if ok, err := s.ReviveSession(ctx, retry); err != nil || !ok {
			t.Fatalf("the same revival again (no row changed): %v %v", ok, err)
		}
		first.EndTime = retry.StartTime
		if err := s.CancelSession(ctx, first); err != nil {
			t.Fatal(err)
		}
		if row, _ := s.Session(ctx, "v-1"); row.Status != quota.StatusUsing || !row.StartTime.Equal(retry.StartTime) {
			t.Fatalf("the earlier attempt's mark touched the retry's row: %+v", row)
		}
		// Cancelled, then revived with another grant in a later period.
		retry.EndTime = retry.StartTime.Add(time.Second)
		if err := s.CancelSession(ctx, retry); err != nil {
			t.Fatal(err)
		}
		later := retry
		later.PeriodStart, later.StartTime, later.GrantedAmount, later.EndTime = period.Add(24*time.Hour), period.Add(25*time.Hour), 30, time.Time{}
		if ok, err := s.ReviveSession(ctx, later); err != nil || !ok {
			t.Fatalf("revive a CANCELLED row: %v %v", ok, err)
		}
		row, _ := s.Session(ctx, "v-1")
		if row.Status != quota.StatusUsing || row.GrantedAmount != 30 || row.ChargedAmount != 30 || row.RefundedAmount != 0 ||
			!row.PeriodStart.Equal(later.PeriodStart) || !row.StartTime.Equal(later.StartTime) || !row.EndTime.IsZero() {
			t.Fatalf("revived row %+v", row)
		}
		// Another apply (amount, client) never revives it; nor a USING row
		// with another grant.
		for name, other := range map[string]func(r quota.UsageRecord) quota.UsageRecord{
			"another amount": func(r quota.UsageRecord) quota.UsageRecord { r.ApplyAmount++; return r },
			"another client": func(r quota.UsageRecord) quota.UsageRecord { r.ClientID = "client-2"; return r },
			"another grant":  func(r quota.UsageRecord) quota.UsageRecord { r.GrantedAmount = 29; return r },
		} {
			if ok, err := s.ReviveSession(ctx, other(later)); err != nil || ok {
				t.Fatalf("%s: revived %v %v", name, ok, err)
			}
		}
		f := usingRec("v-2", 10)
		if err := s.InsertSession(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishSession(ctx, finishRec("v-2", 10, 0, 0, f.StartTime.Add(time.Second))); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.ReviveSession(ctx, f); err != nil || ok {
			t.Fatalf("a FINISHED row revived: %v %v", ok, err)
		}
		if ok, err := s.ReviveSession(ctx, usingRec("v-none", 1)); err != nil || ok {
			t.Fatalf("a missing row revived: %v %v", ok, err)
		}
	})
}
