package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a send func that keeps every group it was given.
type recorder struct {
	mu     sync.Mutex
	groups [][]int
}

func (r *recorder) send(g []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = append(r.groups, g)
}

func (r *recorder) snapshot() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.groups)
}

func submit(t *testing.T, l *Loop[int], items ...int) {
	t.Helper()
	for _, it := range items {
		if err := l.Submit(context.Background(), it); err != nil {
			t.Fatalf("Submit(%d): %v", it, err)
		}
	}
}

func TestGroupsGatherWhileEverySlotIsBusy(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), make(chan struct{})
	l := New(100, 0, 1, func(g []int) {
		rec.send(g)
		if g[0] == 1 {
			close(started)
			<-release // the one slot stays busy
		}
	})
	submit(t, l, 1)
	<-started // item 1 went out alone: no linger, a free slot
	submit(t, l, 2, 3, 4, 5, 6)
	close(release)
	l.Stop()
	wantGroups(t, rec, [][]int{{1}, {2, 3, 4, 5, 6}})
}

func TestAFullGroupIsSentWithoutWaitingOutTheLinger(t *testing.T) {
	rec := &recorder{}
	sent := make(chan struct{}, 1)
	l := New(3, time.Hour, 1, func(g []int) { rec.send(g); sent <- struct{}{} })
	submit(t, l, 1, 2, 3)
	<-sent // full after three: sent although the hour has not passed
	submit(t, l, 4)
	l.Stop() // cuts item 4's linger short and sends it
	wantGroups(t, rec, [][]int{{1, 2, 3}, {4}})
}

func TestEveryItemIsSentExactlyOnceWithinTheBound(t *testing.T) {
	const n, maxItems = 2000, 7
	rec := &recorder{}
	l := New(maxItems, 0, 3, rec.send)
	submitConcurrently(t, l, n)
	l.Stop()
	for i, c := range sentCounts(t, rec, n, maxItems) {
		if c != 1 {
			t.Fatalf("item %d sent %d times, want once", i, c)
		}
	}
}

// sentCounts returns how many times each of the items 0..n-1 was sent, and
// fails the test on a group of more than maxItems, or none.
func sentCounts(t *testing.T, rec *recorder, n, maxItems int) []int {
	t.Helper()
	seen := make([]int, n)
	for _, g := range rec.snapshot() {
		if len(g) == 0 || len(g) > maxItems {
			t.Fatalf("group of %d items, want 1..%d", len(g), maxItems)
		}
		for _, it := range g {
			seen[it]++
		}
	}
	return seen
}

func TestSubmitAfterStopOrWithADoneContextTakesNothing(t *testing.T) {
	rec := &recorder{}
	l := New(10, 0, 1, rec.send)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Submit(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit with a cancelled context: %v, want context.Canceled", err)
	}
	l.Stop()
	l.Stop() // a second Stop returns at once
	if err := l.Submit(context.Background(), 2); !errors.Is(err, ErrStopped) {
		t.Fatalf("Submit after Stop: %v, want ErrStopped", err)
	}
	if got := rec.snapshot(); len(got) != 0 {
		t.Fatalf("groups %v, want none", got)
	}
}

func TestStopWaitsForTheSendsInFlight(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var finished bool
	l := New(10, 0, 2, func(g []int) {
		close(started)
		<-release
		finished = true // read after Stop returns: Stop's wait orders it
	})
	submit(t, l, 1)
	<-started
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a send was still running")
	case release <- struct{}{}:
		// The send took the release: it was still running, and Stop
		// cannot have returned before it ends.
	}
	<-stopped
	if !finished {
		t.Fatal("Stop returned before the send finished")
	}
}

// SubmitBefore gives up when its expiry channel delivers while the loop
// cannot take the item (the one slot busy and the waiting group full), and
// the item is never sent.
func TestSubmitBeforeGivesUpWhenItExpiresAndTakesNothing(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sent []int
	l := New(1, 0, 1, func(g []int) {
		if g[0] == 1 {
			close(started)
			<-release
		}
		mu.Lock()
		sent = append(sent, g...)
		mu.Unlock()
	})
	submit(t, l, 1) // sent; holds the slot
	<-started
	submit(t, l, 2) // the waiting group, full: the loop waits for the slot
	expired := make(chan time.Time, 1)
	expired <- time.Now()
	if err := l.SubmitBefore(context.Background(), expired, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SubmitBefore with an expired bound: %v, want context.DeadlineExceeded", err)
	}
	close(release)
	l.Stop()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sent, []int{1, 2}) {
		t.Fatalf("sent %v, want [1 2] (3 expired before it was taken)", sent)
	}
}

// submitConcurrently submits items 0 … n-1 to l, each from a goroutine of
// its own, and returns once every Submit returned.
func submitConcurrently(t *testing.T, l *Loop[int], n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := l.Submit(context.Background(), i); err != nil {
				t.Errorf("Submit(%d): %v", i, err)
			}
		})
	}
	wg.Wait()
}
