package group

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped is returned by Submit once Stop was called.
var ErrStopped = errors.New("group: stopped")

// Loop gathers items of type T into groups and hands each group to send. It
// is safe for concurrent use.
type Loop[T any] struct {
	maxItems int
	linger   time.Duration
	spaced   bool      // NewSpaced: linger is the least time between two groups' sends
	lastSent time.Time // when the last group took its slot (spaced only)
	inFlight int
	send     func([]T)

	mu      sync.Mutex
	busy    int         // slots taken: groups being sent, or handed to their sender
	next    *pending[T] // the group being gathered; nil: none
	room    chan struct{}
	stopped bool
	sending sync.WaitGroup // one per group from its first item until its send returned
}

// pending is a group that has no slot yet.
type pending[T any] struct {
	items []T
	// ready is closed when the group got its slot and its leader (a Join
	// caller) is to send it; nil: no leader waits, the slot's giver starts
	// a goroutine for it.
	ready chan struct{}
	// lingered: the linger is over (or there is none), so the group takes
	// the first free slot.
	lingered bool
	linger   *time.Timer // ends the linger; nil: none
}

// New starts a loop. maxItems (≥ 1) bounds a group, linger is how long a
// group's first item waits for company even when a slot is free, inFlight
// (≥ 1) bounds the groups being sent at once. send gets each group (never
// empty; the slice is the callee's) and must answer every item in it.
func New[T any](maxItems int, linger time.Duration, inFlight int, send func([]T)) *Loop[T] {
	return &Loop[T]{maxItems: max(1, maxItems), linger: linger, inFlight: max(1, inFlight), send: send}
}

// NewSpaced is New whose linger is the least time between the sends of
// two groups instead of a fixed wait: a group goes when a slot is free and
// interval has passed since the group before it took its slot (or when it
// is full). An item that comes after a quiet interval starts a group that
// is sent at once, so a lone item waits for nothing, as with no linger;
// under load, groups go out once per interval (or per send's round trip,
// if longer) and grow with the rate: Nagle's algorithm, or Kafka's
// linger.ms counted from the last send. Join on such a loop does not lead
// (as with any linger).
func NewSpaced[T any](maxItems int, interval time.Duration, inFlight int, send func([]T)) *Loop[T] {
	l := New(maxItems, interval, inFlight, send)
	l.spaced = interval > 0 // none: exactly New's loop
	return l
}

// Submit hands item to the loop. It returns nil once the loop took it (send
// will see it, on a goroutine of its own), ctx's error if ctx ended first,
// or ErrStopped after Stop; in those two cases item was not taken.
func (l *Loop[T]) Submit(ctx context.Context, item T) error {
	return l.submit(ctx, nil, item, false)
}

// SubmitBefore is Submit that also gives up, with
// context.DeadlineExceeded, when expired delivers (a timer's channel; nil
// never does): a deadline of the caller's own without deriving a context
// for it, which costs a context, a timer and a registration with ctx per
// call.
func (l *Loop[T]) SubmitBefore(ctx context.Context, expired <-chan time.Time, item T) error {
	return l.submit(ctx, expired, item, false)
}

// Join is SubmitBefore for a caller that waits for its item's outcome
// anyway. When item starts a group (and the loop has no linger), the caller
// is the group's sender: it waits for a free slot and runs send on its own
// goroutine, and Join returns nil after send did. If ctx ends or expired
// delivers first, Join returns that error as SubmitBefore does, but item
// was taken all the same: the group is left to the slot's giver, which
// sends it on a goroutine of its own, so send must tell the items whose
// callers gave up (the ledger's batcher checks each row's context). An
// item that does not start a group is taken at once (nil), or, while the
// waiting group is full, as SubmitBefore's.
func (l *Loop[T]) Join(ctx context.Context, expired <-chan time.Time, item T) error {
	return l.submit(ctx, expired, item, l.linger <= 0)
}

func (l *Loop[T]) submit(ctx context.Context, expired <-chan time.Time, item T, lead bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return ErrStopped
		}
		g := l.next
		if g == nil {
			wait := l.linger
			if l.spaced && wait > 0 {
				wait -= time.Since(l.lastSent)
			}
			g = &pending[T]{items: []T{item}, lingered: wait <= 0}
			l.sending.Add(1)
			if g.lingered && l.busy < l.inFlight {
				// A free slot: sent now, alone.
				l.busy++
				if l.spaced {
					l.lastSent = time.Now()
				}
				l.mu.Unlock()
				if lead {
					l.run(g.items, false)
				} else {
					go l.run(g.items, true)
				}
				return nil
			}
			l.next = g
			if lead {
				g.ready = make(chan struct{})
			}
			if !g.lingered {
				g.linger = time.AfterFunc(wait, func() { l.lingerOver(g) })
			}
			if len(g.items) == l.maxItems {
				l.fullLocked(g)
			}
			l.mu.Unlock()
			if lead {
				return l.lead(ctx, expired, g)
			}
			return nil
		}
		if len(g.items) < l.maxItems {
			g.items = append(g.items, item)
			if len(g.items) == l.maxItems {
				l.fullLocked(g)
			}
			l.mu.Unlock()
			return nil
		}
		// The waiting group is full: wait until it has a slot.
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			return context.DeadlineExceeded
		}
	}
}

// lead waits for g's slot and sends g (nil). If the caller stops waiting
// first, g is left to the slot's giver, and lead returns ctx's error or
// context.DeadlineExceeded.
func (l *Loop[T]) lead(ctx context.Context, expired <-chan time.Time, g *pending[T]) error {
	var err error
	select {
	case <-g.ready:
		l.run(g.items, false)
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	l.mu.Lock()
	select {
	case <-g.ready: // it got its slot meanwhile: this caller sends it after all
		l.mu.Unlock()
		l.run(g.items, false)
		return nil
	default:
	}
	g.ready = nil
	l.mu.Unlock()
	return err
}

// run sends one group that holds a slot, then gives the slot on. On a
// goroutine of the loop's own (keep), a waiting group without a leader
// that takes the slot is sent next by the same goroutine, instead of on a
// new one: under load, InFlight goroutines send one group after another.
func (l *Loop[T]) run(items []T, keep bool) {
	for items != nil {
		l.send(items)
		next := l.release(keep)
		l.sending.Done()
		items = next
	}
}

// release frees a slot; the waiting group takes it if it may. It returns
// that group's items when keep and the group has no leader: the caller
// sends them.
func (l *Loop[T]) release(keep bool) []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy--
	g := l.next
	if g == nil || !(g.lingered || l.stopped) {
		return nil
	}
	if keep && g.ready == nil {
		l.takeLocked(g)
		return g.items
	}
	l.assignLocked(g)
	return nil
}

// fullLocked sends g, which just became full, if a slot is free (its linger
// is cut short).
func (l *Loop[T]) fullLocked(g *pending[T]) {
	g.lingered = true
	if l.busy < l.inFlight {
		l.assignLocked(g)
	}
}

// lingerOver ends g's linger: it takes a slot now or the first one freed.
func (l *Loop[T]) lingerOver(g *pending[T]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next != g {
		return // sent already
	}
	g.lingered = true
	if l.busy < l.inFlight {
		l.assignLocked(g)
	}
}

// assignLocked gives a slot to g, the waiting group, and hands g to its
// sender: its leader, or a new goroutine.
func (l *Loop[T]) assignLocked(g *pending[T]) {
	l.takeLocked(g)
	if g.ready != nil {
		close(g.ready)
	} else {
		go l.run(g.items, true)
	}
}

// takeLocked gives a slot to g, the waiting group; callers waiting for room
// may start the next group.
func (l *Loop[T]) takeLocked(g *pending[T]) {
	l.busy++
	if l.spaced {
		l.lastSent = time.Now()
	}
	l.next = nil
	if g.linger != nil {
		g.linger.Stop()
	}
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
}

// Stop ends the loop: the group being gathered is sent, then Stop waits for
// every send in flight to return. Submit fails with ErrStopped afterwards.
func (l *Loop[T]) Stop() {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		if l.room != nil {
			close(l.room)
			l.room = nil
		}
		if g := l.next; g != nil && l.busy < l.inFlight {
			l.assignLocked(g)
		}
	}
	l.mu.Unlock()
	l.sending.Wait()
}
