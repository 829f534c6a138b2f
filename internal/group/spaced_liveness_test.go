package group

import (
	"context"
	"errors"
	"testing"
	"time"
)

// holdFirst is a send func for rec that holds its slot while it sends a
// group whose first item is at most n, until release is opened; each send
// is told on sent (nil: not told) once it returns.
func holdFirst(rec *recorder, n int, release *gate, sent chan<- struct{}) func([]int) {
	return func(g []int) {
		rec.send(g)
		if g[0] <= n {
			<-release.ch
		}
		if sent != nil {
			sent <- struct{}{}
		}
	}
}

// waitFor polls cond (under l.mu) until it holds, for at most 10 s.
func waitFor(t *testing.T, l *Loop[int], what string, cond func() bool) {
	t.Helper()
	for range 10000 {
		l.mu.Lock()
		ok := cond()
		l.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: not within 10 s", what)
}

// A group whose interval ends while every slot is busy takes the first
// slot freed (release hands it on, since its linger is over), with no
// more items and no Stop; for one slot and for several.
func TestSpacedGroupWhoseIntervalEndsWhileSlotsAreBusyIsSentWhenOneFrees(t *testing.T) {
	for _, inFlight := range []int{1, 2, 4} {
		rec := &recorder{}
		release := newGate()
		sent := make(chan struct{}, 16)
		l := NewSpaced(100, time.Millisecond, inFlight, holdFirst(rec, inFlight, release, sent))
		for i := 1; i <= inFlight; i++ {
			submit(t, l, i)
			waitFor(t, l, "the item's group took a slot", func() bool { return l.next == nil })
		}
		submit(t, l, inFlight+1)
		waitFor(t, l, "the interval ended with every slot busy", func() bool {
			return l.busy == inFlight && l.next != nil && l.next.lingered
		})
		release.open()
		for range inFlight + 1 {
			await(t, sent, "every group sent once a slot freed")
		}
		l.Stop()
		if got := rec.snapshot(); len(got) != inFlight+1 || got[inFlight][0] != inFlight+1 {
			t.Fatalf("in flight %d: groups %v", inFlight, got)
		}
	}
}

// Stop while a spaced group waits out its interval and the slot is busy:
// the group is sent once the slot frees, and Stop returns.
func TestSpacedStopWhileAGroupWaitsWithTheSlotBusy(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), newGate()
	defer release.open()
	l := NewSpaced(100, time.Hour, 1, blockFirst(rec, started, release, nil))
	submit(t, l, 1)
	await(t, started, "item 1 sent")
	submit(t, l, 2)
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	waitFor(t, l, "Stop called", func() bool { return l.stopped })
	release.open()
	await(t, stopped, "Stop returned")
	wantGroups(t, rec, [][]int{{1}, {2}})
}

// A caller that finds the spaced group full waits for room, and leaves
// when its context ends or its bound expires; the full group is still
// sent once the slot frees, and the callers' items never are.
func TestSpacedCallersWaitingForRoomLeaveOnTheirBound(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), newGate()
	sent := make(chan struct{}, 4)
	l := NewSpaced(2, time.Hour, 1, blockFirst(rec, started, release, sent))
	defer l.Stop()
	defer release.open()
	submit(t, l, 1)
	await(t, started, "item 1 sent")
	submit(t, l, 2, 3) // full: waits for the slot
	expired := make(chan time.Time, 1)
	errs := make(chan error, 2)
	go func() { errs <- l.SubmitBefore(context.Background(), expired, 4) }()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errs <- l.Submit(ctx, 5) }()
	expired <- time.Now()
	cancel()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("a caller waiting for room: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a caller waiting for room did not leave within 10 s")
		}
	}
	release.open()
	await(t, sent, "item 1's send returned")
	await(t, sent, "the full group sent once the slot freed")
	wantGroups(t, rec, [][]int{{1}, {2, 3}})
}

// With interval 0, NewSpaced is New: a group never waits for a timer, and
// Join's caller leads its group.
func TestSpacedWithNoIntervalIsNew(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), newGate()
	defer release.open()
	l := NewSpaced(100, 0, 1, blockFirst(rec, started, release, nil))
	submit(t, l, 1)
	await(t, started, "item 1 sent")
	submit(t, l, 2)
	l.mu.Lock()
	g := l.next
	l.mu.Unlock()
	if g == nil || !g.lingered || g.linger != nil {
		t.Fatalf("the waiting group lingers (%+v): want it to take the first free slot, with no timer", g)
	}
	release.open()
	if err := l.Join(context.Background(), nil, 3); err != nil {
		t.Fatalf("Join: %v", err)
	}
	l.Stop()
	got := rec.snapshot()
	if len(got) < 2 || got[1][0] != 2 {
		t.Fatalf("groups %v, want {1} {2 ...}", got)
	}
}

// Under concurrent load, every item of a spaced loop is sent exactly once,
// and without Stop: no group is left waiting for a slot or a timer.
func TestSpacedSendsEveryItemOnceWithoutStop(t *testing.T) {
	for _, inFlight := range []int{1, 3} {
		const n, maxItems = 2000, 7
		rec := &recorder{}
		l := NewSpaced(maxItems, 100*time.Microsecond, inFlight, rec.send)
		submitConcurrently(t, l, n)
		waitFor(t, l, "every item sent before Stop", func() bool {
			sent := 0
			for _, g := range rec.snapshot() {
				sent += len(g)
			}
			return sent == n
		})
		l.Stop()
		for i, c := range sentCounts(t, rec, n, maxItems) {
			if c != 1 {
				t.Fatalf("in flight %d: item %d sent %d times, want once", inFlight, i, c)
			}
		}
	}
}
