package quota

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// until polls cond every millisecond until it holds, and fails the test
// after 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// A policy is reused for the cache's TTL; once expired it is still served
// at once while one read in the background refreshes it (a request never
// waits for the store for a resource it has read), and the refreshed
// policy is served after that read. While the store is unavailable the
// expired policy stays in use (limits live in Redis, and a fail-open
// policy must still be known to fail open), but a policy the store says is
// gone is gone.
func TestPolicyCacheTTLAndStaleUse(t *testing.T) {
	now := testEpoch
	var mu sync.Mutex
	answer, fail := testPolicy, error(nil)
	set := func(p Policy, err error) { mu.Lock(); answer, fail = p, err; mu.Unlock() }
	st := &stubs{getPolicy: func(string) (Policy, error) { mu.Lock(); defer mu.Unlock(); return answer, fail }}
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
	changed := testPolicy
	changed.TotalLimit = 7
	set(changed, nil)
	now = now.Add(time.Millisecond) // exactly the TTL: expired
	if p, err := get(); err != nil || p.TotalLimit != testPolicy.TotalLimit {
		t.Fatalf("at the TTL: %+v, %v; want the expired policy at once", p, err)
	}
	until(t, "the refreshed policy is served", func() bool { p, err := get(); return err == nil && p.TotalLimit == 7 })
	if n := st.n("GetPolicy"); n != 2 {
		t.Fatalf("%d reads, want 2: the refresh is made once, not per request", n)
	}
	for _, down := range []error{ErrUnavailable, &CircuitOpenError{Backend: "mysql"}} {
		now = now.Add(time.Hour)
		set(Policy{}, down)
		reads := st.n("GetPolicy")
		if p, err := get(); err != nil || p.TotalLimit != 7 {
			t.Fatalf("store down (%v): %+v, %v; want the stale policy", down, p, err)
		}
		until(t, "a refresh is tried", func() bool { return st.n("GetPolicy") > reads })
		if p, err := get(); err != nil || p.TotalLimit != 7 {
			t.Fatalf("store down (%v), after the refresh failed: %+v, %v; want the stale policy", down, p, err)
		}
	}
	now = now.Add(time.Hour)
	set(Policy{}, ErrResourceNotFound)
	until(t, "a deleted policy is gone", func() bool { _, err := get(); return errors.Is(err, ErrResourceNotFound) })
	// Nothing cached: the store's error, after one read.
	reads := st.n("GetPolicy")
	if _, err := svc.Policy(ctx, "cold"); !errors.Is(err, ErrResourceNotFound) || st.n("GetPolicy") != reads+1 {
		t.Fatalf("cold: %v after %d reads", err, st.n("GetPolicy")-reads)
	}
	set(Policy{}, ErrUnavailable)
	if _, err := svc.Policy(ctx, "cold"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cold, store down: %v", err)
	}
}

// After a change (ForgetPolicy: a PUT here, or another instance's
// announcement) the next call waits for a new read and gets the changed
// answer, never the one cached before, also when a read that started
// before the change answers after it.
func TestStaleCacheReadsAgainAfterAChange(t *testing.T) {
	now := testEpoch
	c := newStaleCache[int](time.Second, time.Minute, func() time.Time { return now })
	ctx := context.Background()
	value := func(v int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { return v, nil }
	}
	if v, err := c.get(ctx, "r", value(1)); err != nil || v != 1 {
		t.Fatalf("%d, %v", v, err)
	}
	// A refresh of the old answer, in flight while the change is made.
	gate := make(chan struct{})
	old := c.load(ctx, "r", c.m["r"].gen, now, func(context.Context) (int, error) { <-gate; return 1, nil })
	c.invalidate("r")
	if v, err := c.get(ctx, "r", value(2)); err != nil || v != 2 {
		t.Fatalf("after the change: %d, %v; want 2", v, err)
	}
	close(gate)
	if r := <-old; r.Err != nil || r.Val.(int) != 1 {
		t.Fatalf("the old read: %+v", r)
	}
	if v, ok := c.peek("r"); !ok || v != 2 {
		t.Fatalf("after the old read answered: %d, %v; want 2", v, ok)
	}
	// Invalidated, then the store is down: the old answer once the read
	// fails, and from then on without waiting.
	c.invalidate("r")
	down := func(context.Context) (int, error) { return 0, ErrUnavailable }
	for range 2 {
		if v, err := c.get(ctx, "r", down); err != nil || v != 2 {
			t.Fatalf("invalidated, store down: %d, %v; want 2", v, err)
		}
	}
	if _, ok := c.peek("r"); !ok {
		t.Fatal("after a failed read of an invalidated answer: still invalidated, want it served as expired")
	}
}

// The shared load is not bound to the first caller's context: that caller
// leaving does not fail the load, which is stored for the next callers
// (the load's own deadline, Options.LedgerTimeout, bounds it).
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
	if p, err := svc.Policy(ctx, "r"); err != nil && !errors.Is(err, ErrUnavailable) || err == nil && p.ResourceName != "r" {
		t.Fatalf("the caller that left: %+v, %v", p, err)
	}
	if p, err := svc.Policy(context.Background(), "r"); err != nil || p.ResourceName != "r" || st.n("GetPolicy") != 1 {
		t.Fatalf("%+v, %v after %d reads; want the first load's policy", p, err, st.n("GetPolicy"))
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
	// A TTL past the test's days: no refresh reads pol in the background.
	svc := NewService(st, st, st, sched, Options{Now: func() time.Time { return now }, PolicyCacheTTL: 1000 * time.Hour})
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

// Invalidating keys that were never read keeps nothing (100,000 PUTs left a
// tombstone each); a key invalidated while its first read is in flight
// does not store that read's (maybe older) answer, and its tombstone goes
// once the read ended.
func TestStaleCacheKeepsNoTombstoneWithoutARead(t *testing.T) {
	c := newStaleCache[int](time.Minute, time.Minute, time.Now)
	for i := range 10000 {
		c.invalidate(string(rune('a'+i%26)) + time.Duration(i).String())
	}
	if len(c.m) != 0 {
		t.Fatalf("%d entries after invalidating keys never read; want 0", len(c.m))
	}
	started, release := make(chan struct{}), make(chan struct{})
	reads := 0
	read := func(context.Context) (int, error) {
		reads++
		if reads == 1 {
			close(started)
			<-release
			return 1, nil // read before the change
		}
		return 2, nil
	}
	done := make(chan int)
	go func() { v, _ := c.get(context.Background(), "k", read); done <- v }()
	<-started
	c.invalidate("k") // the change lands while the first read is in flight
	close(release)
	if v := <-done; v != 1 {
		t.Fatalf("the first get answered %d; want its own read's 1", v)
	}
	c.mu.Lock()
	left := len(c.m) + len(c.reading)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d entries or reads kept after the read ended; want none (the older answer not stored)", left)
	}
	if v, err := c.get(context.Background(), "k", read); err != nil || v != 2 {
		t.Fatalf("after the change: %d, %v; want 2, read again", v, err)
	}
}
