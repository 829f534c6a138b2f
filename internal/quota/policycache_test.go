package quota

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A policy is reused for the cache's TTL, then read again; while the
// store is unavailable an expired policy is still used (limits live in
// Redis, and a fail-open policy must still be known to fail open), but a
// policy the store says is gone is gone.
func TestPolicyCacheTTLAndStaleUse(t *testing.T) {
	now := testEpoch
	st := &stubs{}
	svc := newStubService(st, Options{PolicyCacheTTL: time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()
	get := func() (Policy, error) { t.Helper(); return svc.Policy(ctx, "r") }
	if _, err := get(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second - time.Millisecond)
	if _, err := get(); err != nil || st.n("GetPolicy") != 1 {
		t.Fatalf("within the TTL: %v, %d reads", err, st.n("GetPolicy"))
	}
	now = now.Add(time.Millisecond) // exactly the TTL: expired
	if _, err := get(); err != nil || st.n("GetPolicy") != 2 {
		t.Fatalf("at the TTL: %v, %d reads", err, st.n("GetPolicy"))
	}
	for _, down := range []error{ErrUnavailable, &CircuitOpenError{Backend: "mysql"}} {
		now = now.Add(time.Hour)
		st.getPolicy = func(string) (Policy, error) { return Policy{}, down }
		if p, err := get(); err != nil || p.ResourceName != "r" {
			t.Fatalf("store down (%v): %+v, %v; want the stale policy", down, p, err)
		}
	}
	now = now.Add(time.Hour)
	st.getPolicy = func(string) (Policy, error) { return Policy{}, ErrResourceNotFound }
	if _, err := get(); !errors.Is(err, ErrResourceNotFound) {
		t.Fatalf("deleted: %v, want ErrResourceNotFound", err)
	}
	// Nothing cached: the store's error, after one read.
	reads := st.n("GetPolicy")
	if _, err := svc.Policy(ctx, "cold"); !errors.Is(err, ErrResourceNotFound) || st.n("GetPolicy") != reads+1 {
		t.Fatalf("cold: %v after %d reads", err, st.n("GetPolicy")-reads)
	}
	st.getPolicy = func(string) (Policy, error) { return Policy{}, ErrUnavailable }
	if _, err := svc.Policy(ctx, "cold"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cold, store down: %v", err)
	}
}

// The shared load is not bound to the first caller's context: that caller
// leaving does not fail the load for the others (the store's own timeout
// bounds it).
func TestPolicyLoadOutlivesTheCallerThatStartedIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := &stubs{}
	st.getPolicy = func(res string) (Policy, error) {
		cancel()
		p := testPolicy
		p.ResourceName = res
		return p, nil
	}
	svc := newStubService(st, Options{})
	if p, err := svc.Policy(ctx, "r"); err != nil || p.ResourceName != "r" {
		t.Fatalf("%+v, %v", p, err)
	}
}

// countSched counts the periods it computes.
type countSched struct {
	daySched
	mu sync.Mutex
	n  int
}

func (c *countSched) PeriodAt(p Policy, t time.Time) (Period, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.daySched.PeriodAt(p, t)
}

// A period is computed once per period and policy, not once per request;
// a new period, or a changed policy, is computed afresh.
func TestPeriodIsComputedOncePerPeriod(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	sched := &countSched{}
	pol := testPolicy
	st := &stubs{getPolicy: func(string) (Policy, error) { return pol, nil }}
	svc := NewService(st, st, st, sched, Options{Now: func() time.Time { return now }, PolicyCacheTTL: time.Hour})
	ctx := context.Background()
	status := func() Period {
		t.Helper()
		s, err := svc.Status(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		return s.Period
	}
	first := status()
	status()
	if sched.n != 1 {
		t.Fatalf("%d periods computed for two requests in one period, want 1", sched.n)
	}
	now = first.End // the next period
	if p := status(); p.Start != first.End || sched.n != 2 {
		t.Fatalf("next period %+v after %d computations", p, sched.n)
	}
	pol.UpdatedAt = now // a changed policy
	svc.ForgetPolicy("r")
	status()
	if sched.n != 3 {
		t.Fatalf("%d computations after a policy change, want 3", sched.n)
	}
	// A policy not (or no longer) cached is computed each time.
	other := testPolicy
	other.ResourceName = "other"
	for range 2 {
		if _, err := svc.policies.periodAt(other, now); err != nil {
			t.Fatal(err)
		}
	}
	if sched.n != 5 {
		t.Fatalf("%d computations, want 5", sched.n)
	}
}
