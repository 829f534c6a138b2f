package quota

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The promise of Policy: concurrent misses of one resource on a cold cache
// send one read to the store. synctest.Wait returns once every caller is
// blocked for good: the loader inside GetPolicy, the rest waiting for it.
// Without the shared load they would all be inside GetPolicy.
func TestColdPolicyCacheSendsOneReadForConcurrentCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		st := &stubs{}
		st.getPolicy = func(res string) (Policy, error) {
			<-gate
			p := testPolicy
			p.ResourceName = res
			return p, nil
		}
		svc := newStubService(st, Options{})
		const callers = 8
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				p, err := svc.Policy(context.Background(), "r")
				if err == nil && p.ResourceName != "r" {
					err = errWrongPolicy
				}
				errs[i] = err
			})
		}
		synctest.Wait()
		reads := st.n("GetPolicy")
		close(gate)
		wg.Wait()
		if reads != 1 {
			t.Fatalf("%d concurrent callers on a cold cache sent %d reads, want 1", callers, reads)
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
		}
		// Each resource has its own load: another one is read on its own.
		if _, err := svc.Policy(context.Background(), "other"); err != nil || st.n("GetPolicy") != 2 {
			t.Fatalf("another resource: %v after %d reads, want its own read", err, st.n("GetPolicy"))
		}
	})
}

var errWrongPolicy = invalid("resourceName", "the policy of another resource")

// A load that panics releases the callers waiting for it (the panic
// reaches each of them, as it reaches the loader) and leaves the key free:
// the next call reads again. A waiter left hanging, or a key left taken,
// blocks for good, and synctest fails the test as deadlocked.
func TestPolicyLoadThatPanicsReleasesItsWaitersAndTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		st := &stubs{}
		st.getPolicy = func(string) (Policy, error) {
			<-gate
			panic("store corrupted")
		}
		svc := newStubService(st, Options{})
		const callers = 4
		var wg sync.WaitGroup
		panicked := make([]bool, callers)
		for i := range callers {
			wg.Go(func() {
				defer func() { panicked[i] = recover() != nil }()
				_, _ = svc.Policy(context.Background(), "r")
			})
		}
		synctest.Wait()
		reads := st.n("GetPolicy")
		close(gate)
		wg.Wait()
		if reads != 1 {
			t.Fatalf("%d reads, want 1 shared", reads)
		}
		for i, p := range panicked {
			if !p {
				t.Errorf("caller %d returned normally from a load that panicked", i)
			}
		}
		st.getPolicy = nil // the store is healthy again
		p, err := svc.Policy(context.Background(), "r")
		if err != nil || p.ResourceName != "r" || st.n("GetPolicy") != 2 {
			t.Fatalf("after the panic: %+v, %v, %d reads; want the policy from a second read", p, err, st.n("GetPolicy"))
		}
	})
}

// Seeding makes the same promise per resource and period: concurrent
// callers that find no balance (a new period, or Redis lost its state) make
// one seed, and read the ledger once for it.
func TestColdBalanceIsSeededOnceForConcurrentCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var mu sync.Mutex
		seeded := false
		st := &stubs{}
		st.balance = func(string, Period) (Balance, error) {
			mu.Lock()
			defer mu.Unlock()
			return Balance{Exists: seeded, Limit: 100}, nil
		}
		st.periodTotals = func(string, time.Time) (PeriodTotals, error) {
			<-gate
			return PeriodTotals{Charged: 30}, nil
		}
		st.seed = func(_ string, _ Period, limit int64, tot PeriodTotals, _ []UsageRecord) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			seeded = true
			return true, nil
		}
		svc := newStubService(st, Options{})
		if _, err := svc.Policy(context.Background(), "r"); err != nil { // warm the policy cache
			t.Fatal(err)
		}
		const callers = 8
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() { _, errs[i] = svc.Status(context.Background(), "r") })
		}
		synctest.Wait()
		reads := st.n("PeriodTotals")
		close(gate)
		wg.Wait()
		if reads != 1 {
			t.Fatalf("%d concurrent callers on a missing balance read the ledger %d times, want 1", callers, reads)
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
		}
		if st.n("Seed") != 1 || st.n("TryLock") != 1 || st.n("Unlock") != 1 {
			t.Fatalf("seeds %d, locks %d, unlocks %d; want one of each", st.n("Seed"), st.n("TryLock"), st.n("Unlock"))
		}
	})
}
