package quota

import (
	"context"
	"errors"
	"testing"
	"time"
)

// finishReq is a finish of session s-1 of r with 3 used.
var finishReq = FinishRequest{ResourceName: "r", SessionID: "s-1", Actual: 3}

func TestFinishRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		req   FinishRequest
		field string
	}{
		{FinishRequest{ResourceName: "R", SessionID: "s", Actual: 1}, "resourceName"},
		{FinishRequest{ResourceName: "r", SessionID: "", Actual: 1}, "sessionId"},
		{FinishRequest{ResourceName: "r", SessionID: "s", Actual: -1}, "actualUsedAmount"},
	} {
		st := &stubs{}
		if _, err := newStubService(st, Options{}).Finish(context.Background(), c.req); field(err) != c.field || st.n("Finish") != 0 {
			t.Errorf("%+v: %v, want field %q", c.req, err, c.field)
		}
	}
	st := &stubs{getPolicy: func(string) (Policy, error) { return Policy{}, ErrResourceNotFound }}
	if _, err := newStubService(st, Options{}).Finish(context.Background(), finishReq); !errors.Is(err, ErrResourceNotFound) || st.n("Finish") != 0 {
		t.Fatalf("unknown resource: %v", err)
	}
}

// A finish settles in the balance store with the actual usage and the
// retention, then settles the ledger row with what the store computed.
func TestFinishSettlesBothStores(t *testing.T) {
	end := testEpoch.Add(time.Hour)
	var cmd FinishCmd
	var row UsageRecord
	st := &stubs{
		finish: func(c FinishCmd) (FinishResult, error) {
			cmd = c
			return FinishResult{ClientID: "c1", Granted: 5, Charged: 3, Refunded: 2, Remaining: 97, PeriodStart: testEpoch,
				StartTime: testEpoch, EndTime: end, WasLeaked: true}, nil
		},
		finishRow: func(r UsageRecord) error { row = r; return nil },
	}
	svc := newStubService(st, Options{FinishedRetention: time.Hour})
	resp, err := svc.Finish(context.Background(), FinishRequest{ResourceName: "r", SessionID: "s-1", ClientID: "c1", Actual: 3})
	if err != nil {
		t.Fatal(err)
	}
	if cmd != (FinishCmd{ResourceName: "r", SessionID: "s-1", ClientID: "c1", Actual: 3, Retention: time.Hour}) {
		t.Fatalf("store asked %+v", cmd)
	}
	want := UsageRecord{ResourceName: "r", ClientID: "c1", SessionID: "s-1", PeriodStart: testEpoch, GrantedAmount: 5,
		ChargedAmount: 3, RefundedAmount: 2, StartTime: testEpoch, EndTime: end, Status: StatusFinished, LeakRecovered: true}
	if row != want {
		t.Fatalf("ledger row %+v, want %+v", row, want)
	}
	if resp != (FinishResponse{SessionID: "s-1", Granted: 5, Charged: 3, Refunded: 2, Remaining: 97, WasLeaked: true, QuotaType: TypeTokens}) {
		t.Fatalf("answer %+v", resp)
	}
	// The row cannot be settled: ErrUnavailable (a retry completes it).
	st.finishRow = func(UsageRecord) error { return ErrUnavailable }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ledger down: %v", err)
	}
	st.finish = func(FinishCmd) (FinishResult, error) { return FinishResult{}, ErrSessionConflict }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrSessionConflict) || st.n("Session") != 0 {
		t.Fatalf("store conflict: %v", err)
	}
}

// finishEnv is a service whose balance store does not hold the session
// (until restored) and whose ledger holds row.
func finishEnv(row UsageRecord, now time.Time) (*stubs, *Service) {
	restored := false
	st := &stubs{
		session: func(string) (UsageRecord, error) { return row, nil },
		finish: func(c FinishCmd) (FinishResult, error) {
			if !restored {
				return FinishResult{}, ErrSessionNotFound
			}
			return FinishResult{Granted: row.GrantedAmount, Charged: c.Actual, PeriodStart: row.PeriodStart, WasLeaked: row.Status == StatusLeaked}, nil
		},
		restore:       func(string, []UsageRecord) error { restored = true; return nil },
		restoreLeaked: func(string, UsageRecord) error { restored = true; return nil },
	}
	return st, newStubService(st, Options{Now: func() time.Time { return now }, FinishedRetention: time.Hour})
}

// Past its retention in Redis a finished session is answered from its
// ledger row: the same actual replays, another conflicts.
func TestFinishRepeatAnsweredFromTheLedger(t *testing.T) {
	row := UsageRecord{ResourceName: "r", SessionID: "s-1", GrantedAmount: 5, ChargedAmount: 3, RefundedAmount: 2,
		PeriodStart: testEpoch, Status: StatusFinished}
	st, svc := finishEnv(row, testEpoch.Add(time.Hour))
	st.balance = func(_ string, per Period) (Balance, error) {
		if per != today {
			t.Errorf("remaining read in %+v, want the session's period", per)
		}
		return Balance{Exists: true, Limit: 100, Charged: 10}, nil
	}
	resp, err := svc.Finish(context.Background(), finishReq)
	if err != nil || resp != (FinishResponse{SessionID: "s-1", Granted: 5, Charged: 3, Refunded: 2, Remaining: 90, Replayed: true, QuotaType: TypeTokens}) {
		t.Fatalf("%+v, %v", resp, err)
	}
	if _, err := svc.Finish(context.Background(), FinishRequest{ResourceName: "r", SessionID: "s-1", Actual: 4}); !errors.Is(err, ErrSessionConflict) {
		t.Fatalf("another actual: %v", err)
	}
	st.balance = func(string, Period) (Balance, error) { return Balance{}, ErrUnavailable }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("balance unreadable: %v", err)
	}
	// Another resource's or client's session is not found.
	for _, req := range []FinishRequest{
		{ResourceName: "x", SessionID: "s-1", Actual: 3},
		{ResourceName: "r", SessionID: "s-1", ClientID: "c9", Actual: 3},
	} {
		if _, err := svc.Finish(context.Background(), req); !errors.Is(err, ErrSessionNotFound) {
			t.Errorf("%+v: %v", req, err)
		}
	}
	st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrSessionNotFound }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("not in the ledger: %v", err)
	}
	// The scheduler cannot place the row's period.
	st2 := &stubs{session: func(string) (UsageRecord, error) { return row, nil }}
	bad := NewService(st2, st2, st2, badSched{}, Options{})
	if _, err := bad.Finish(context.Background(), finishReq); err == nil {
		t.Fatal("a finish without a period answered")
	}
}

// An open row that Redis lost: the session is restored, counted once by the
// balance (CatchUp: its reservation may never have been made there, e.g. a
// fail-open grant), then finished in the store as any other.
func TestFinishRestoresAnOpenSessionRedisLost(t *testing.T) {
	row := UsageRecord{ResourceName: "r", SessionID: "s-1", GrantedAmount: 5, ChargedAmount: 5, PeriodStart: testEpoch, Status: StatusUsing}
	st, svc := finishEnv(row, testEpoch.Add(time.Hour))
	resp, err := svc.Finish(context.Background(), finishReq)
	if err != nil || resp.Charged != 3 || resp.Replayed || st.n("CatchUp") != 1 || st.n("RestoreSessions") != 0 || st.n("FinishSession") != 1 {
		t.Fatalf("%+v, %v; calls %v", resp, err, st.calls)
	}
	// A pools' session is restored without counting (its counters are the
	// pools'), as is one of an earlier period.
	pooled := row
	pooled.BusinessLine = "a"
	st, svc = finishEnv(pooled, testEpoch.Add(time.Hour))
	if resp, err := svc.Finish(context.Background(), finishReq); err != nil || resp.Charged != 3 || st.n("CatchUp") != 0 || st.n("RestoreSessions") != 1 {
		t.Fatalf("pools' session: %+v, %v; calls %v", resp, err, st.calls)
	}
	// The balance is gone too: the period is seeded (which restores it).
	st, svc = finishEnv(row, testEpoch.Add(time.Hour))
	st.balance = func(string, Period) (Balance, error) { return Balance{}, nil }
	st.seed = func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return true, nil }
	st.openPage = func(string, int64, int) ([]UsageRecord, int64, error) { _ = st.restore("r", nil); return nil, 0, nil }
	if resp, err := svc.Finish(context.Background(), finishReq); err != nil || resp.Charged != 3 || st.n("Seed") != 1 {
		t.Fatalf("seeded: %+v, %v; calls %v", resp, err, st.calls)
	}
	// It cannot be restored: ErrUnavailable.
	st, svc = finishEnv(row, testEpoch.Add(time.Hour))
	st.restore = func(string, []UsageRecord) error { return ErrUnavailable }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("restore failed: %v", err)
	}
	// Restored, yet the store still does not finish it: ErrUnavailable.
	st, svc = finishEnv(row, testEpoch.Add(time.Hour))
	st.finish = func(FinishCmd) (FinishResult, error) { return FinishResult{}, ErrSessionNotFound }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("still missing: %v", err)
	}
}

// A session swept as LEAKED that Redis lost is trued up from its row
// within the retention after the sweep; after it, it is not active.
func TestFinishOfALeakedSessionRedisLost(t *testing.T) {
	swept := testEpoch.Add(time.Hour)
	row := UsageRecord{ResourceName: "r", SessionID: "s-1", GrantedAmount: 5, ChargedAmount: 5, PeriodStart: testEpoch,
		Status: StatusLeaked, EndTime: swept}
	st, svc := finishEnv(row, swept.Add(time.Hour-time.Millisecond))
	resp, err := svc.Finish(context.Background(), finishReq)
	if err != nil || !resp.WasLeaked || resp.Charged != 3 || st.n("RestoreLeaked") != 1 || st.n("FinishSession") != 1 {
		t.Fatalf("within retention: %+v, %v; calls %v", resp, err, st.calls)
	}
	var na *NotActiveError
	for name, now := range map[string]time.Time{"at the retention's end": swept.Add(time.Hour), "after": swept.Add(2 * time.Hour)} {
		st, svc := finishEnv(row, now)
		if _, err := svc.Finish(context.Background(), finishReq); !errors.As(err, &na) || na.Status != StatusLeaked || st.n("RestoreLeaked") != 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	noEnd := row
	noEnd.EndTime = time.Time{}
	st, svc = finishEnv(noEnd, swept)
	if _, err := svc.Finish(context.Background(), finishReq); !errors.As(err, &na) || st.n("RestoreLeaked") != 0 {
		t.Fatalf("no sweep time: %v", err)
	}
	st, svc = finishEnv(row, swept)
	st.restoreLeaked = func(string, UsageRecord) error { return ErrUnavailable }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("restore failed: %v", err)
	}
	// Restored, but its retention ended in between.
	st, svc = finishEnv(row, swept)
	st.finish = func(FinishCmd) (FinishResult, error) { return FinishResult{}, ErrSessionNotFound }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.As(err, &na) {
		t.Fatalf("gone again: %v", err)
	}
	st.finish = func(FinishCmd) (FinishResult, error) { return FinishResult{}, ErrUnavailable }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) || errors.As(err, &na) {
		t.Fatalf("store down: %v", err)
	}
}

// A repeated finish after Redis lost its state (restarted empty) is answered
// from the ledger with remaining as it is now: the current period's balance
// is seeded first, as Status seeds it. It answered remainingQuota 0, the
// figures of the missing balance, until the next call happened to seed.
func TestFinishRepeatSeedsTheBalanceRedisLost(t *testing.T) {
	row := UsageRecord{ResourceName: "r", SessionID: "s-1", GrantedAmount: 5, ChargedAmount: 3, RefundedAmount: 2,
		PeriodStart: testEpoch, Status: StatusFinished}
	st, svc := finishEnv(row, testEpoch.Add(time.Hour))
	seeded := false
	st.balance = func(string, Period) (Balance, error) {
		if !seeded {
			return Balance{}, nil
		}
		return Balance{Exists: true, Limit: 100, Charged: 10}, nil
	}
	st.seed = func(_ string, per Period, _ int64, _ PeriodTotals, _ []UsageRecord) (bool, error) {
		if per != today {
			t.Errorf("seeded %+v, want the session's period", per)
		}
		seeded = true
		return true, nil
	}
	resp, err := svc.Finish(context.Background(), finishReq)
	if err != nil || resp != (FinishResponse{SessionID: "s-1", Granted: 5, Charged: 3, Refunded: 2, Remaining: 90, Replayed: true, QuotaType: TypeTokens}) {
		t.Fatalf("%+v, %v; calls %v", resp, err, st.calls)
	}
	if st.n("Seed") != 1 {
		t.Fatalf("seeded %d times, want 1", st.n("Seed"))
	}
	// Seeding fails: ErrUnavailable, not a made-up remaining.
	st, svc = finishEnv(row, testEpoch.Add(time.Hour))
	st.balance = func(string, Period) (Balance, error) { return Balance{}, nil }
	st.seed = func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return false, ErrUnavailable }
	if _, err := svc.Finish(context.Background(), finishReq); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("seed failed: %v", err)
	}
	// A session of an earlier period whose balance is gone: nothing is
	// seeded for it, and remaining is 0 as the store answers then.
	st, svc = finishEnv(row, testEpoch.Add(25*time.Hour))
	st.balance = func(string, Period) (Balance, error) { return Balance{}, nil }
	resp, err = svc.Finish(context.Background(), finishReq)
	if err != nil || resp.Remaining != 0 || st.n("Seed") != 0 {
		t.Fatalf("earlier period: %+v, %v; calls %v", resp, err, st.calls)
	}
}
