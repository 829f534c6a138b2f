package group

import (
	"sync"
	"testing"
	"time"
)

// gate is closed once, by open, whichever of the test and its cleanup
// comes first, so a failing test does not leave a send blocked on it.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// blockFirst is a send func for rec that holds the slot while it sends the
// group holding item 1, until release is closed; started is closed when
// that send began.
func blockFirst(rec *recorder, started chan struct{}, release *gate, sent chan<- struct{}) func([]int) {
	return func(g []int) {
		rec.send(g)
		if g[0] == 1 {
			close(started)
			<-release.ch
		}
		if sent != nil {
			sent <- struct{}{}
		}
	}
}

// await fails the test unless ch delivers (or is closed) within 10 s.
func await[C any](t *testing.T, ch <-chan C, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// waitIdle waits until no slot of l is taken.
func waitIdle(t *testing.T, l *Loop[int]) {
	t.Helper()
	for range 5000 {
		l.mu.Lock()
		busy := l.busy
		l.mu.Unlock()
		if busy == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("a slot still taken after 5 s")
}

// The first item, and one that comes after a quiet interval, is sent at
// once; one that comes within the interval of the last send waits for the
// rest of it (here an hour: until Stop).
func TestSpacedSendsAfterAQuietIntervalAtOnce(t *testing.T) {
	rec := &recorder{}
	sent := make(chan struct{}, 4)
	l := NewSpaced(100, time.Hour, 1, func(g []int) { rec.send(g); sent <- struct{}{} })
	submit(t, l, 1)
	await(t, sent, "the first item sent")
	waitIdle(t, l)
	l.mu.Lock()
	l.lastSent = l.lastSent.Add(-2 * time.Hour) // the hour has passed
	l.mu.Unlock()
	submit(t, l, 2)
	await(t, sent, "an item after a quiet interval sent")
	waitIdle(t, l)
	submit(t, l, 3) // within the hour of 2's send: waits
	if got := rec.snapshot(); len(got) != 2 {
		t.Fatalf("groups %v, want {1} {2} with 3 waiting", got)
	}
	l.Stop()
	wantGroups(t, rec, [][]int{{1}, {2}, {3}})
}

// A group started while the slot is busy waits out the interval even once
// the slot is free, gathering what comes meanwhile (New with no linger
// would send {2, 3} as soon as the slot is free and 4 apart).
func TestSpacedHoldsAGroupStartedWhileTheSlotIsBusy(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), newGate()
	l := NewSpaced(100, time.Hour, 1, blockFirst(rec, started, release, nil))
	stopped := false
	defer func() {
		if !stopped {
			release.open()
			l.Stop()
		}
	}()
	submit(t, l, 1)
	await(t, started, "item 1 sent")
	submit(t, l, 2, 3)
	release.open()
	waitIdle(t, l) // the slot is free, and {2, 3} still lingers
	submit(t, l, 4)
	if got := rec.snapshot(); len(got) != 1 {
		t.Fatalf("groups %v before the linger ended, want only {1}", got)
	}
	l.Stop() // cuts the linger short
	stopped = true
	wantGroups(t, rec, [][]int{{1}, {2, 3, 4}})
}

// A waiting group that fills up is sent as soon as a slot is free.
func TestSpacedSendsAFullGroupWithoutWaitingOutTheLinger(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), newGate()
	sent := make(chan struct{}, 4)
	l := NewSpaced(2, time.Hour, 1, blockFirst(rec, started, release, sent))
	defer l.Stop()
	defer release.open() // before Stop
	submit(t, l, 1)
	await(t, started, "item 1 sent")
	submit(t, l, 2, 3) // full
	release.open()
	await(t, sent, "item 1's send returned")
	await(t, sent, "the full group sent once its slot freed")
	wantGroups(t, rec, [][]int{{1}, {2, 3}})
}

// A waiting group is sent when the interval since the last send ends,
// with no Stop and no more items.
func TestSpacedSendsAGroupWhenTheIntervalEnds(t *testing.T) {
	rec := &recorder{}
	started, release := make(chan struct{}), newGate()
	sent := make(chan struct{}, 4)
	l := NewSpaced(100, 20*time.Millisecond, 1, blockFirst(rec, started, release, sent))
	defer l.Stop()
	defer release.open() // before Stop
	submit(t, l, 1)
	await(t, started, "item 1 sent")
	submit(t, l, 2)
	release.open()
	await(t, sent, "item 1's send returned")
	await(t, sent, "the waiting group sent when the interval ended")
	wantGroups(t, rec, [][]int{{1}, {2}})
}
