package quota

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A heartbeat renews the lease by the policy's leak threshold in the
// balance store only.
func TestHeartbeatRenewsTheLease(t *testing.T) {
	exp := testEpoch.Add(2 * time.Hour)
	var lease time.Duration
	st := &stubs{heartbeat: func(res, id, client string, l time.Duration) (time.Time, error) {
		if res != "r" || id != "s-1" || client != "c1" {
			t.Errorf("renewed %s/%s for %q", res, id, client)
		}
		lease = l
		return exp, nil
	}}
	resp, err := newStubService(st, Options{}).Heartbeat(context.Background(), "r", "s-1", "c1")
	if err != nil || resp.SessionID != "s-1" || resp.Status != StatusUsing || !resp.LeaseExpiresAt.Equal(exp) ||
		resp.PolicyVersion == "" || lease != 30*time.Second || st.n("Session") != 0 {
		t.Fatalf("%+v, %v; lease %v", resp, err, lease)
	}
	for _, c := range []struct{ res, id, field string }{{"R", "s-1", "resourceName"}, {"r", "", "sessionId"}} {
		if _, err := newStubService(st, Options{}).Heartbeat(context.Background(), c.res, c.id, ""); field(err) != c.field {
			t.Errorf("%s/%s: %v", c.res, c.id, err)
		}
	}
	st.getPolicy = func(string) (Policy, error) { return Policy{}, ErrResourceNotFound }
	if _, err := newStubService(st, Options{}).Heartbeat(context.Background(), "r", "s-1", ""); !errors.Is(err, ErrResourceNotFound) {
		t.Fatalf("unknown resource: %v", err)
	}
	st = &stubs{heartbeat: func(string, string, string, time.Duration) (time.Time, error) { return time.Time{}, ErrUnavailable }}
	if resp, err := newStubService(st, Options{}).Heartbeat(context.Background(), "r", "s-1", ""); !errors.Is(err, ErrUnavailable) || resp.PolicyVersion != "" {
		t.Fatalf("store down: %+v, %v", resp, err)
	}
}

// A session Redis does not hold is looked up in the ledger: settled, it is
// not active; open (Redis lost it), it is restored and renewed; another
// resource's or client's, or unknown, it is not found.
func TestHeartbeatOfASessionRedisDoesNotHold(t *testing.T) {
	exp := testEpoch.Add(2 * time.Hour)
	env := func(row UsageRecord) *stubs {
		restored := false
		return &stubs{
			session: func(string) (UsageRecord, error) { return row, nil },
			heartbeat: func(string, string, string, time.Duration) (time.Time, error) {
				if !restored {
					return time.Time{}, ErrSessionNotFound
				}
				return exp, nil
			},
			restore: func(string, []UsageRecord) error { restored = true; return nil },
		}
	}
	ctx := context.Background()
	var na *NotActiveError
	for _, status := range []Status{StatusFinished, StatusLeaked} {
		st := env(UsageRecord{ResourceName: "r", SessionID: "s-1", Status: status})
		if _, err := newStubService(st, Options{}).Heartbeat(ctx, "r", "s-1", ""); !errors.As(err, &na) || na.Status != status {
			t.Errorf("%s: %v", status, err)
		}
	}
	open := UsageRecord{ResourceName: "r", SessionID: "s-1", ClientID: "c1", Status: StatusUsing, PeriodStart: testEpoch}
	st := env(open)
	resp, err := newStubService(st, Options{}).Heartbeat(ctx, "r", "s-1", "c1")
	if err != nil || !resp.LeaseExpiresAt.Equal(exp) || resp.Status != StatusUsing || st.n("CatchUp") != 1 || resp.PolicyVersion == "" {
		t.Fatalf("restored: %+v, %v", resp, err)
	}
	st = env(open)
	st.restore = func(string, []UsageRecord) error { return ErrUnavailable }
	if _, err := newStubService(st, Options{}).Heartbeat(ctx, "r", "s-1", "c1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("restore failed: %v", err)
	}
	st = env(open)
	st.restore = func(string, []UsageRecord) error { return nil } // restored, yet still missing
	if _, err := newStubService(st, Options{}).Heartbeat(ctx, "r", "s-1", "c1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("still missing: %v", err)
	}
	for name, c := range map[string]struct{ res, client string }{"another resource": {"x", ""}, "another client": {"r", "c9"}} {
		st := env(open)
		if _, err := newStubService(st, Options{}).Heartbeat(ctx, c.res, "s-1", c.client); !errors.Is(err, ErrSessionNotFound) || st.n("RestoreSessions") != 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	st = env(open)
	st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrSessionNotFound }
	if _, err := newStubService(st, Options{}).Heartbeat(ctx, "r", "s-1", ""); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

// Status reads the current period's balance, seeding it first when the
// store has none; the limit shown is the live one.
func TestStatusReadsAndSeedsTheBalance(t *testing.T) {
	seeded := false
	st := &stubs{
		balance: func(_ string, per Period) (Balance, error) {
			if per != today {
				t.Errorf("balance of %+v", per)
			}
			return Balance{Exists: seeded, Limit: 80, Charged: 10, Reserved: 5, ActiveSessions: 2}, nil
		},
		seed: func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) {
			seeded = true
			return true, nil
		},
	}
	svc := newStubService(st, Options{})
	s, err := svc.Status(context.Background(), "r")
	if err != nil || s.Policy.TotalLimit != 80 || s.Used != 10 || s.Reserved != 5 || s.Remaining != 65 ||
		s.ActiveSessions != 2 || s.Period != today || st.n("Seed") != 1 || st.n("Balance") != 2 {
		t.Fatalf("%+v, %v; calls %v", s, err, st.calls)
	}
	if _, err := svc.Status(context.Background(), "r"); err != nil || st.n("Seed") != 1 {
		t.Fatalf("seeded balance seeded again: %v", err)
	}
	if _, err := svc.Status(context.Background(), "R"); field(err) != "resourceName" {
		t.Fatalf("bad name: %v", err)
	}
	st.balance = func(string, Period) (Balance, error) { return Balance{}, ErrUnavailable }
	if _, err := svc.Status(context.Background(), "r"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("store down: %v", err)
	}
	st = &stubs{
		balance: func(string, Period) (Balance, error) { return Balance{}, nil },
		seed:    func(string, Period, int64, PeriodTotals, []UsageRecord) (bool, error) { return false, ErrUnavailable },
	}
	if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); !errors.Is(err, ErrUnavailable) || st.n("Balance") != 1 {
		t.Fatalf("seed failed: %v", err)
	}
	st = &stubs{getPolicy: func(string) (Policy, error) { return Policy{}, ErrResourceNotFound }}
	if _, err := newStubService(st, Options{}).Status(context.Background(), "r"); !errors.Is(err, ErrResourceNotFound) {
		t.Fatalf("unknown resource: %v", err)
	}
}
