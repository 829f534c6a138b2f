package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// today is the period of the stub service's clock (testEpoch + 1h):
// testPolicy's first period, as it was created at testEpoch.
var today = Period{Start: testEpoch, End: testEpoch.Add(24 * time.Hour)}

// Bad input is refused with the field named, before any store is asked.
func TestApplyRefusesBadInputAndTouchesNothing(t *testing.T) {
	for _, c := range []struct {
		req   ApplyRequest
		field string
	}{
		{ApplyRequest{ResourceName: "", Amount: 1}, "resourceName"},
		{ApplyRequest{ResourceName: "r", Amount: 0}, "applyAmount"},
		{ApplyRequest{ResourceName: "r", Amount: 5, MinAmount: -1}, "minAmount"},
		{ApplyRequest{ResourceName: "r", Amount: 5, MinAmount: 6}, "minAmount"},
		{ApplyRequest{ResourceName: "r", Amount: 5, ClientID: "a b"}, "clientId"},
		{ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "a b"}, "sessionId"},
		{ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "Bad Line"}, "businessLine"},
	} {
		st := &stubs{}
		_, err := newStubService(st, Options{}).Apply(context.Background(), c.req)
		if field(err) != c.field || st.n("Apply")+st.n("InsertSession") != 0 {
			t.Errorf("%+v: %v, want field %q and no store call (calls %v)", c.req, err, c.field, st.calls)
		}
	}
	// The edges are accepted.
	for _, req := range []ApplyRequest{
		{ResourceName: "r", Amount: 5, MinAmount: 5},
		{ResourceName: "r", Amount: 5, ClientID: "c1", SessionID: "s-1"},
	} {
		if _, err := newStubService(&stubs{}, Options{}).Apply(context.Background(), req); err != nil {
			t.Errorf("%+v: %v", req, err)
		}
	}
}

// A grant reserves in the balance store with the policy's lease in the
// current period, writes the session's ledger row, and answers the grant
// drawn from the resource's own balance.
func TestApplyGrantReservesAndRecords(t *testing.T) {
	var cmd ApplyCmd
	var row UsageRecord
	start := testEpoch.Add(time.Hour)
	st := &stubs{
		apply: func(c ApplyCmd) (ApplyResult, error) {
			cmd = c
			return ApplyResult{Outcome: ApplyGranted, Granted: 4, Remaining: 96, PeriodStart: c.Period.Start,
				StartTime: start, LeaseExpiresAt: start.Add(c.Lease), Drawn: PoolSplit{Base: 4}}, nil
		},
		insert: func(r UsageRecord) error { row = r; return nil },
	}
	svc := newStubService(st, Options{})
	resp, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, MinAmount: 2, ClientID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.SessionID != "gen-1" || cmd.Amount != 5 || cmd.MinAmount != 2 || cmd.ClientID != "c1" ||
		cmd.Period != today || cmd.Lease != 30*time.Second || !cmd.FirstPeriod || cmd.Pools != nil {
		t.Fatalf("store asked %+v", cmd)
	}
	if resp.Refused() || resp.Granted != 4 || resp.Drawn != (PoolSplit{Base: 4}) ||
		resp.SessionID != "gen-1" || resp.Remaining != 96 || resp.HeartbeatIntervalSeconds != 10 ||
		resp.QuotaType != TypeTokens || resp.Replayed || resp.FailOpen || !resp.LeaseExpiresAt.Equal(start.Add(30*time.Second)) ||
		resp.PolicyVersion == "" {
		t.Fatalf("answer %+v", resp)
	}
	want := UsageRecord{ResourceName: "r", ClientID: "c1", SessionID: "gen-1", PeriodStart: testEpoch, ApplyAmount: 5,
		MinAmount: 2, GrantedAmount: 4, ChargedAmount: 4, StartTime: start, Status: StatusUsing}
	if row != want {
		t.Fatalf("ledger row %+v, want %+v", row, want)
	}
	// The next day is not the policy's first period.
	svc = newStubService(st, Options{Now: func() time.Time { return testEpoch.Add(25 * time.Hour) }})
	if _, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || cmd.FirstPeriod ||
		!cmd.Period.Start.Equal(testEpoch.Add(24*time.Hour)) {
		t.Fatalf("second day: %v, %+v", err, cmd)
	}
}

// A refusal changes nothing, says why and when the balance refills.
func TestApplyRefusalRecordsNothing(t *testing.T) {
	st := &stubs{apply: func(ApplyCmd) (ApplyResult, error) { return ApplyResult{Outcome: ApplyExhausted, Remaining: 3}, nil }}
	resp, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5})
	if err != nil || !resp.Refused() || resp.Refusal.Reason != RefusedExhausted || !resp.Refusal.NextResetAt.Equal(today.End) ||
		resp.Remaining != 3 || resp.Granted != 0 || resp.Drawn != (PoolSplit{}) || resp.PolicyVersion != "" || resp.QuotaType != TypeTokens {
		t.Fatalf("%+v, %v", resp, err)
	}
	if st.n("InsertSession")+st.n("Session")+st.n("Cancel") != 0 {
		t.Fatalf("a refusal touched the ledger: %v", st.calls)
	}
}

// The store's clock decides the period: a wrong period is retried in the
// period of the store's time; a missing balance is seeded and retried.
func TestApplyFollowsTheStoresPeriodAndSeeds(t *testing.T) {
	tomorrow := Period{Start: today.End, End: today.End.Add(24 * time.Hour)}
	var periods []Period
	var seeded Period
	st := &stubs{
		apply: func(c ApplyCmd) (ApplyResult, error) {
			periods = append(periods, c.Period)
			switch {
			case c.Period != tomorrow:
				return ApplyResult{Outcome: ApplyWrongPeriod, Now: tomorrow.Start.Add(time.Minute)}, nil
			case seeded != tomorrow:
				if c.FirstPeriod {
					t.Error("tomorrow is not the first period")
				}
				return ApplyResult{Outcome: ApplyNeedBalance}, nil
			}
			return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
		},
		balance: func(string, Period) (Balance, error) { return Balance{}, nil },
		seed: func(_ string, per Period, limit int64, _ PeriodTotals, _ []UsageRecord) (bool, error) {
			seeded = per
			return true, nil
		},
	}
	resp, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5})
	if err != nil || resp.Granted != 5 || len(periods) != 3 || periods[0] != today || st.n("Seed") != 1 {
		t.Fatalf("%+v, %v; periods %v, seeds %d", resp, err, periods, st.n("Seed"))
	}
}

// Stores that keep disagreeing end in ErrUnavailable after a bounded number
// of attempts; an outcome the Service does not know is an error.
func TestApplyGivesUpOnStoresThatKeepChanging(t *testing.T) {
	st := &stubs{apply: func(c ApplyCmd) (ApplyResult, error) {
		return ApplyResult{Outcome: ApplyWrongPeriod, Now: c.Period.End.Add(time.Hour)}, nil
	}}
	_, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5})
	if !errors.Is(err, ErrUnavailable) || st.n("Apply") != maxAttempts || maxAttempts != 4 {
		t.Fatalf("%v after %d attempts, want ErrUnavailable after 4", err, st.n("Apply"))
	}
	st.apply = func(ApplyCmd) (ApplyResult, error) { return ApplyResult{Outcome: 99}, nil }
	if _, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); err == nil {
		t.Fatal("an unknown outcome was accepted")
	}
	// A seeding that fails fails the apply.
	st = &stubs{
		apply:   func(ApplyCmd) (ApplyResult, error) { return ApplyResult{Outcome: ApplyNeedBalance}, nil },
		balance: func(string, Period) (Balance, error) { return Balance{}, nil },
		seed:    func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return false, ErrUnavailable },
	}
	if _, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, ErrUnavailable) || st.n("Apply") != 1 {
		t.Fatalf("seeding failed: %v after %d applies", err, st.n("Apply"))
	}
	// A period the scheduler cannot compute fails the apply.
	st = &stubs{
		getPolicy: func(string) (Policy, error) { p := testPolicy; p.Timezone = "Bad/Zone"; return p, nil },
	}
	svc := NewService(st, st, st, badSched{}, Options{Now: func() time.Time { return testEpoch }})
	if _, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, errNoPeriod) || st.n("Apply") != 0 {
		t.Fatalf("no period: %v", err)
	}
	if _, err := svc.Status(context.Background(), "r"); !errors.Is(err, errNoPeriod) {
		t.Fatalf("status without a period: %v", err)
	}
}

var errNoPeriod = errors.New("no period")

// badSched computes no period.
type badSched struct{}

func (badSched) Validate(string, string) error { return nil }
func (badSched) PeriodAt(Policy, time.Time) (Period, error) {
	return Period{}, errNoPeriod
}

// With the balance store down, a CLOSED policy refuses with ErrUnavailable
// and records nothing; an OPEN one grants the whole amount, unknown
// remaining, and writes the ledger row when MySQL answers.
func TestApplyFailsClosedOrOpen(t *testing.T) {
	down := func(ApplyCmd) (ApplyResult, error) { return ApplyResult{}, ErrUnavailable }
	st := &stubs{apply: down}
	if _, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, ErrUnavailable) || st.n("InsertSession") != 0 {
		t.Fatalf("CLOSED: %v, %d rows", err, st.n("InsertSession"))
	}
	open := func(string) (Policy, error) { p := testPolicy; p.FailMode = FailOpen; return p, nil }
	var row UsageRecord
	st = &stubs{apply: down, getPolicy: open, insert: func(r UsageRecord) error { row = r; return nil }}
	resp, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, ClientID: "c1"})
	now := testEpoch.Add(time.Hour)
	if err != nil || !resp.FailOpen || !resp.FailOpenRecorded || !errors.Is(resp.FailOpenCause, ErrUnavailable) ||
		resp.Granted != 5 || resp.Remaining != -1 || resp.Drawn != (PoolSplit{}) || resp.SessionID != "gen-1" ||
		!resp.LeaseExpiresAt.Equal(now.Add(30*time.Second)) || resp.HeartbeatIntervalSeconds != 10 || resp.QuotaType != TypeTokens {
		t.Fatalf("OPEN: %+v, %v", resp, err)
	}
	want := UsageRecord{ResourceName: "r", ClientID: "c1", SessionID: "gen-1", PeriodStart: testEpoch, ApplyAmount: 5,
		GrantedAmount: 5, ChargedAmount: 5, StartTime: now, Status: StatusUsing}
	if row != want {
		t.Fatalf("fail-open row %+v, want %+v", row, want)
	}
	// MySQL down too: granted all the same, not recorded.
	st.insert = func(UsageRecord) error { return ErrUnavailable }
	if resp, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); err != nil ||
		!resp.FailOpen || resp.FailOpenRecorded || resp.Granted != 5 {
		t.Fatalf("OPEN, both down: %+v, %v", resp, err)
	}
	// An OPEN policy does not turn errors that are not outages into grants.
	st.apply = func(ApplyCmd) (ApplyResult, error) { return ApplyResult{}, ErrSessionConflict }
	if _, err := newStubService(st, Options{}).Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5}); !errors.Is(err, ErrSessionConflict) {
		t.Fatalf("OPEN, conflict: %v", err)
	}
}

// Redis no longer holds a session that the ledger has: the repeated apply,
// which the store refused as a new one, is answered from the ledger row;
// with other arguments it is a conflict.
func TestApplyRepeatAnsweredFromTheLedger(t *testing.T) {
	start := testEpoch.Add(30 * time.Minute)
	ledgerRow := UsageRecord{ResourceName: "r", SessionID: "s-1", ApplyAmount: 5, GrantedAmount: 5, ChargedAmount: 5,
		StartTime: start, PeriodStart: testEpoch, Status: StatusUsing}
	st := &stubs{
		apply:     func(ApplyCmd) (ApplyResult, error) { return ApplyResult{Outcome: ApplyExhausted, Remaining: 2}, nil },
		session:   func(string) (UsageRecord, error) { return ledgerRow, nil },
		heartbeat: func(string, string, string, time.Duration) (time.Time, error) { return start.Add(time.Hour), nil },
	}
	svc := newStubService(st, Options{Now: func() time.Time { return start.Add(time.Second) }})
	resp, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
	if err != nil || !resp.Replayed || resp.Refused() || resp.Granted != 5 || resp.Remaining != 2 || resp.SessionID != "s-1" ||
		!resp.LeaseExpiresAt.Equal(start.Add(30*time.Second)) || resp.Drawn != (PoolSplit{Base: 5}) || resp.HeartbeatIntervalSeconds != 10 {
		t.Fatalf("replay from the ledger: %+v, %v", resp, err)
	}
	if st.n("Heartbeat") != 0 {
		t.Fatal("a replay whose lease is still running was renewed")
	}
	for _, other := range []ApplyRequest{
		{ResourceName: "r", Amount: 6, SessionID: "s-1"},
		{ResourceName: "r", Amount: 5, MinAmount: 1, SessionID: "s-1"},
		{ResourceName: "r", Amount: 5, SessionID: "s-1", ClientID: "c9"},
	} {
		if _, err := svc.Apply(context.Background(), other); !errors.Is(err, ErrSessionConflict) {
			t.Errorf("%+v: %v, want ErrSessionConflict", other, err)
		}
	}
	ledgerRow.ResourceName = "other"
	if _, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); !errors.Is(err, ErrSessionConflict) {
		t.Errorf("the id of another resource's session: %v", err)
	}
	// Not in the ledger either, or no id given: a plain refusal.
	st.session = nil
	if resp, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); err != nil || !resp.Refused() {
		t.Fatalf("unknown id: %+v, %v", resp, err)
	}
	// The lease of the first answer is over: the replay renews it.
	ledgerRow.ResourceName = "r"
	st.session = func(string) (UsageRecord, error) { return ledgerRow, nil }
	svc = newStubService(st, Options{Now: func() time.Time { return start.Add(time.Minute) }})
	resp, err = svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
	if err != nil || !resp.LeaseExpiresAt.Equal(start.Add(time.Hour)) || st.n("Heartbeat") != 1 {
		t.Fatalf("expired replay: %+v, %v; want the renewed lease", resp, err)
	}
	// ... and says so when it cannot.
	st.heartbeat = func(string, string, string, time.Duration) (time.Time, error) { return time.Time{}, ErrUnavailable }
	if _, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("renewal failed: %v", err)
	}
	// ... and, for a session swept meanwhile, answers as an apply: its
	// status, and no word of a heartbeat the caller never sent (it read
	// "replay of session s-1: heartbeat r: session s-1 is LEAKED").
	st.heartbeat = func(string, string, string, time.Duration) (time.Time, error) {
		return time.Time{}, fmt.Errorf("heartbeat r: %w", &NotActiveError{SessionID: "s-1", Status: StatusLeaked})
	}
	_, err = svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
	var na *NotActiveError
	if !errors.As(err, &na) || na.Status != StatusLeaked || strings.Contains(err.Error(), "heartbeat") ||
		!strings.Contains(err.Error(), "apply with a new sessionId") {
		t.Fatalf("a replay of a swept session: %v, want a LEAKED NotActiveError said as an apply's answer", err)
	}
}

// A lease exactly at its end is over: the replay is renewed.
func TestApplyReplayAtTheLeaseEndIsRenewed(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	st := &stubs{
		apply: func(c ApplyCmd) (ApplyResult, error) {
			return ApplyResult{Outcome: ApplyReplayed, Granted: 5, LeaseExpiresAt: now, PeriodStart: c.Period.Start}, nil
		},
		heartbeat: func(string, string, string, time.Duration) (time.Time, error) { return now.Add(time.Minute), nil },
	}
	svc := newStubService(st, Options{})
	resp, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"})
	if err != nil || !resp.Replayed || !resp.LeaseExpiresAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("%+v, %v", resp, err)
	}
	st.apply = func(c ApplyCmd) (ApplyResult, error) {
		return ApplyResult{Outcome: ApplyReplayed, Granted: 5, LeaseExpiresAt: now.Add(time.Millisecond), PeriodStart: c.Period.Start}, nil
	}
	if resp, err := svc.Apply(context.Background(), ApplyRequest{ResourceName: "r", Amount: 5, SessionID: "s-1"}); err != nil ||
		!resp.LeaseExpiresAt.Equal(now.Add(time.Millisecond)) || st.n("Heartbeat") != 1 {
		t.Fatalf("a running lease: %+v, %v, %d heartbeats", resp, err, st.n("Heartbeat"))
	}
}
