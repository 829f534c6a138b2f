package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// busyLoop is a loop of one slot whose first group ({1}) holds the slot
// until release is closed.
func busyLoop(t *testing.T, maxItems int, rec *recorder) (l *Loop[int], release chan struct{}) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	l = New(maxItems, 0, 1, func(g []int) {
		rec.send(g)
		if g[0] == 1 {
			close(started)
			<-release
		}
	})
	submit(t, l, 1)
	<-started
	return l, release
}

func TestJoinSendsTheGroupItStartsBeforeReturning(t *testing.T) {
	rec := &recorder{}
	l := New(10, 0, 1, rec.send)
	defer l.Stop()
	if err := l.Join(context.Background(), nil, 7); err != nil {
		t.Fatalf("Join: %v", err)
	}
	// No wait: the caller sent its group itself.
	wantGroups(t, rec, [][]int{{7}})
}

func TestJoinLeadsTheGroupThatGathersWhileTheSlotIsBusy(t *testing.T) {
	rec := &recorder{}
	l, release := busyLoop(t, 10, rec)
	led := make(chan error)
	go func() { led <- l.Join(context.Background(), nil, 2) }() // starts the waiting group: its leader
	waitNext(t, l)
	for _, it := range []int{3, 4, 5} {
		if err := l.Join(context.Background(), nil, it); err != nil { // followers: taken at once
			t.Fatalf("Join(%d): %v", it, err)
		}
	}
	select {
	case err := <-led:
		t.Fatalf("the leader returned (%v) before its group had a slot", err)
	default:
	}
	close(release)
	if err := <-led; err != nil {
		t.Fatalf("leader's Join: %v", err)
	}
	// The leader returns after its send.
	wantGroups(t, rec, [][]int{{1}, {2, 3, 4, 5}})
	l.Stop()
}

func TestALeaderThatStopsWaitingLeavesItsGroupToBeSent(t *testing.T) {
	rec := &recorder{}
	l, release := busyLoop(t, 10, rec)
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan error)
	go func() { led <- l.Join(ctx, nil, 2) }()
	waitNext(t, l)
	submit(t, l, 3)
	cancel()
	if err := <-led; !errors.Is(err, context.Canceled) { // at once, item 2 taken all the same
		t.Fatalf("leader's Join after its context ended: %v, want context.Canceled", err)
	}
	expired := make(chan time.Time, 1)
	expired <- time.Now()
	if err := l.Join(context.Background(), expired, 4); err != nil {
		t.Fatalf("Join(4) into a group with room: %v", err)
	}
	close(release)
	l.Stop() // the freed slot's giver sent {2, 3, 4}; Stop waited for it
	wantGroups(t, rec, [][]int{{1}, {2, 3, 4}})
}

func TestJoinWaitsForRoomAndGivesUpWithoutBeingTaken(t *testing.T) {
	rec := &recorder{}
	l, release := busyLoop(t, 2, rec)
	submit(t, l, 2, 3) // the waiting group, full
	expired := make(chan time.Time, 1)
	expired <- time.Now()
	if err := l.Join(context.Background(), expired, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join with no room and an expired bound: %v, want context.DeadlineExceeded", err)
	}
	done := make(chan error)
	go func() { done <- l.Join(context.Background(), nil, 5) }() // waits for room, then leads {5}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Join(5): %v", err)
	}
	l.Stop()
	if err := l.Join(context.Background(), nil, 6); !errors.Is(err, ErrStopped) {
		t.Fatalf("Join after Stop: %v, want ErrStopped", err)
	}
	wantGroups(t, rec, [][]int{{1}, {2, 3}, {5}})
}

func TestEveryJoinedItemIsSentExactlyOnce(t *testing.T) {
	const n, maxItems = 3000, 5
	rec := &recorder{}
	l := New(maxItems, 0, 2, rec.send)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var notTaken []int
	for i := range n {
		wg.Go(func() {
			var expired chan time.Time
			if i%3 == 0 { // a third give up at once when there is no room (or lead nothing)
				expired = make(chan time.Time, 1)
				expired <- time.Now()
			}
			if err := l.Join(context.Background(), expired, i); err != nil && expired == nil {
				t.Errorf("Join(%d) without a bound: %v", i, err)
			} else if err != nil {
				mu.Lock()
				notTaken = append(notTaken, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l.Stop()
	seen := sentCounts(t, rec, n, maxItems)
	for _, it := range notTaken {
		seen[it] += 10 // gave up: sent at most once (a leader's item is sent all the same)
	}
	for i, c := range seen {
		if c != 1 && c != 10 && c != 11 {
			t.Fatalf("item %d: sent %d times (+10 if its Join gave up), want once, or at most once after giving up", i, c)
		}
	}
}

// waitNext waits until the loop has a waiting group.
func waitNext(t *testing.T, l *Loop[int]) {
	t.Helper()
	for range 5000 {
		l.mu.Lock()
		ok := l.next != nil
		l.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no waiting group after 5 s")
}

// A lingering group is sent when its linger ends, with no Stop and no more
// items; Join on a loop with a linger does not send on the caller's
// goroutine (it returns while the group lingers).
func TestALingeringGroupIsSentWhenItsLingerEnds(t *testing.T) {
	rec := &recorder{}
	sent := make(chan struct{}, 1)
	l := New(10, 20*time.Millisecond, 1, func(g []int) { rec.send(g); sent <- struct{}{} })
	if err := l.Join(context.Background(), nil, 1); err != nil {
		t.Fatalf("Join: %v", err)
	}
	<-sent
	wantGroups(t, rec, [][]int{{1}})
	l.Stop()
}

// wantGroups fails the test unless rec got exactly the groups want, in order.
func wantGroups(t *testing.T, rec *recorder, want [][]int) {
	t.Helper()
	if got := rec.snapshot(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}
