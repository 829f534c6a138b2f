package quota

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// heldLocks is the stubs' balance store whose reconcile lock (the first
// call of every catch-up) is held until the test releases it, one call per
// value sent on release, or the call's context ends. It counts the calls
// in it now and at most.
type heldLocks struct {
	*stubs
	release chan struct{}
	mu      sync.Mutex
	in, max int
	runs    map[string]int // ended catch-ups per resource (OnCatchUp)
}

func (h *heldLocks) TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error) {
	if name != "reconcile" {
		return h.stubs.TryLock(ctx, resource, name, ttl)
	}
	h.mu.Lock()
	h.in++
	h.max = max(h.max, h.in)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.in--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
		return "t", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (h *heldLocks) state() (in, max, ended int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.runs {
		ended += n
	}
	return h.in, h.max, ended
}

// newHeldLocks is a Service whose catch-ups run at once after each rebuild
// (from a snapshot) and wait in heldLocks' reconcile lock.
func newHeldLocks(t *testing.T, opt Options) (*Service, *heldLocks) {
	t.Helper()
	h := &heldLocks{stubs: &stubs{}, release: make(chan struct{}), runs: map[string]int{}}
	opt.CatchUpAfter = time.Nanosecond
	opt.OnCatchUp = func(r string, _ error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.runs[r]++
	}
	if opt.Now == nil {
		opt.Now = func() time.Time { return testEpoch.Add(time.Hour) }
	}
	led := snapStubs{stubs: h.stubs, byID: func(ids []string) (map[string]UsageRecord, error) {
		out := map[string]UsageRecord{}
		for _, id := range ids {
			out[id] = UsageRecord{SessionID: id, PeriodStart: testEpoch, Status: StatusFinished, ChargedAmount: 1}
		}
		return out, nil
	}}
	svc := NewService(h, led, h.stubs, daySched{}, opt)
	t.Cleanup(svc.Close)
	return svc, h
}

// waitFor polls cond every millisecond until it holds, or fails after 10 s
// with what.
func waitFor(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(time.Millisecond)
	}
}

func seedResources(t *testing.T, svc *Service, n int) {
	t.Helper()
	per := Period{Start: testEpoch, End: testEpoch.Add(24 * time.Hour)}
	for i := range n {
		pol := testPolicy
		pol.ResourceName = fmt.Sprint("r", i)
		if err := svc.seed(t.Context(), pol, per); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 23 §1: 1,000 resources seeded at once started 1,000 catch-ups at
// once, and the backends' calls timed out. At most CatchUpConcurrency (4 by
// default) run at once; the others wait their turn and each runs once.
func TestCatchUpsRunAtMostFourAtOnceAndEachOnce(t *testing.T) {
	svc, h := newHeldLocks(t, Options{})
	seedResources(t, svc, 50)
	for ended := 0; ended < 50; ended++ {
		want := min(4, 50-ended)
		waitFor(t, func() string {
			in, max, _ := h.state()
			return fmt.Sprintf("after %d ended: %d catch-ups in flight (at most %d), want %d", ended, in, max, want)
		}, func() bool {
			in, max, _ := h.state()
			return in == want || max > 4
		})
		if _, max, _ := h.state(); max > 4 {
			t.Fatalf("%d catch-ups ran at once, want at most 4", max)
		}
		h.release <- struct{}{}
		waitFor(t, func() string { return fmt.Sprintf("catch-up %d did not end", ended+1) },
			func() bool { _, _, e := h.state(); return e == ended+1 })
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range 50 {
		if n := h.runs[fmt.Sprint("r", i)]; n != 1 {
			t.Errorf("r%d caught up %d times, want once", i, n)
		}
	}
}

// A resource's rebuild whose catch-up is already waiting adds its snapshot
// to it (one catch-up finishes the rows of both); one whose catch-up is
// running runs once more after it, with the new snapshot.
func TestCatchUpsOfOneResourceAreNotQueuedTwice(t *testing.T) {
	svc, h := newHeldLocks(t, Options{CatchUpConcurrency: 1})
	var fins []string
	var mu sync.Mutex
	h.finish = func(c FinishCmd) (FinishResult, error) {
		mu.Lock()
		defer mu.Unlock()
		fins = append(fins, c.ResourceName+"/"+c.SessionID)
		return FinishResult{}, nil
	}
	per := Period{Start: testEpoch, End: testEpoch.Add(24 * time.Hour)}
	a, b := testPolicy, testPolicy
	a.ResourceName, b.ResourceName = "a", "b"
	svc.catchUpLater(a, per, []UsageRecord{row("a1", testEpoch)})
	waitFor(t, func() string { return "a's catch-up did not start" }, func() bool { in, _, _ := h.state(); return in == 1 })
	svc.catchUpLater(a, per, []UsageRecord{row("a2", testEpoch)})
	svc.catchUpLater(a, per, []UsageRecord{row("a3", testEpoch)})
	svc.catchUpLater(b, per, []UsageRecord{row("b1", testEpoch)})
	svc.catchUpLater(b, per, []UsageRecord{row("b2", testEpoch)})
	waitFor(t, func() string { return "timers left" }, func() bool {
		svc.catchUps.mu.Lock()
		defer svc.catchUps.mu.Unlock()
		return len(svc.catchUps.timers) == 0
	})
	for ended := 0; ended < 3; ended++ {
		h.release <- struct{}{}
		waitFor(t, func() string { return fmt.Sprintf("catch-up %d did not end", ended+1) },
			func() bool { _, _, e := h.state(); return e == ended+1 })
	}
	svc.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if h.runs["a"] != 2 || h.runs["b"] != 1 || h.max != 1 {
		t.Fatalf("catch-ups %v (at most %d at once), want a twice, b once, one at a time", h.runs, h.max)
	}
	got := map[string]bool{}
	for _, f := range fins {
		got[f] = true
	}
	for _, f := range []string{"a/a1", "a/a2", "a/a3", "b/b1", "b/b2"} {
		if !got[f] {
			t.Errorf("%s not finished by a catch-up (finished %v)", f, fins)
		}
	}
}

// Close stops the running catch-ups, waits for them, drops the waiting
// ones (reconciliation repairs what they would have) and starts none.
func TestCloseStopsTheWaitingCatchUpsToo(t *testing.T) {
	svc, h := newHeldLocks(t, Options{})
	seedResources(t, svc, 50)
	waitFor(t, func() string { return "four catch-ups did not start" }, func() bool { in, _, _ := h.state(); return in == 4 })
	svc.Close()
	if in, max, ended := h.state(); in != 0 || max != 4 || ended != 4 {
		t.Fatalf("after Close: %d in flight, %d at most, %d ended; want 0, 4 and the 4 running", in, max, ended)
	}
}
