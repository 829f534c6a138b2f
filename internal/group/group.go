package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrStopped is returned by Submit once Stop was called.
var ErrStopped = errors.New("group: stopped")

// Loop gathers items of type T into groups and hands each group to send on
// a goroutine of its own. It is safe for concurrent use.
type Loop[T any] struct {
	maxItems int
	linger   time.Duration
	send     func([]T)

	in       chan T        // unbuffered: an item is handed over only when the loop takes it
	slots    chan struct{} // one per group being sent
	sending  sync.WaitGroup
	quit     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once
}

// New starts a loop. maxItems (≥ 1) bounds a group, linger is how long a
// group's first item waits for company even when a slot is free, inFlight
// (≥ 1) bounds the groups being sent at once. send gets each group (never
// empty; the slice is the callee's) and must answer every item in it; it
// runs on its own goroutine.
func New[T any](maxItems int, linger time.Duration, inFlight int, send func([]T)) *Loop[T] {
	l := &Loop[T]{
		maxItems: max(1, maxItems),
		linger:   linger,
		send:     send,
		in:       make(chan T),
		slots:    make(chan struct{}, max(1, inFlight)),
		quit:     make(chan struct{}),
		exited:   make(chan struct{}),
	}
	go l.run()
	return l
}

// Submit hands item to the loop. It returns nil once the loop took it (send
// will see it), ctx's error if ctx ended first, or ErrStopped after Stop; in
// those two cases item was not taken.
func (l *Loop[T]) Submit(ctx context.Context, item T) error {
	return l.SubmitBefore(ctx, nil, item)
}

// SubmitBefore is Submit that also gives up, with
// context.DeadlineExceeded, when expired delivers (a timer's channel; nil
// never does): a deadline of the caller's own without deriving a context
// for it, which costs a context, a timer and a registration with ctx per
// call.
func (l *Loop[T]) SubmitBefore(ctx context.Context, expired <-chan time.Time, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case l.in <- item:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return context.DeadlineExceeded
	case <-l.quit:
		return ErrStopped
	}
}

// Stop ends the loop: the group being gathered is sent, then Stop waits for
// every send in flight to return. Submit fails with ErrStopped afterwards.
func (l *Loop[T]) Stop() {
	l.stopOnce.Do(func() { close(l.quit) })
	<-l.exited
}

func (l *Loop[T]) run() {
	defer close(l.exited)
	defer l.sending.Wait()
	batch := make([]T, 0, l.maxItems)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case it := <-l.in:
			batch = append(batch[:0], it)
		case <-l.quit:
			return
		}
		var linger <-chan time.Time
		if l.linger > 0 {
			timer.Reset(l.linger)
			linger = timer.C
		}
		acquired, stopping := false, false
	gather:
		for len(batch) < l.maxItems {
			// Take every item already waiting before racing for a slot.
			select {
			case it := <-l.in:
				batch = append(batch, it)
				continue
			default:
			}
			var slot chan<- struct{}
			if linger == nil {
				slot = l.slots
			}
			select {
			case it := <-l.in:
				batch = append(batch, it)
			case slot <- struct{}{}:
				acquired = true
				break gather
			case <-linger:
				linger = nil
			case <-l.quit:
				stopping = true
				break gather
			}
		}
		if linger != nil {
			timer.Stop()
		}
		if !acquired {
			l.slots <- struct{}{}
		}
		l.sending.Add(1)
		go func(g []T) {
			defer func() { <-l.slots; l.sending.Done() }()
			l.send(g)
		}(slices.Clone(batch))
		clear(batch) // the clone holds the items now
		if stopping {
			return
		}
	}
}
