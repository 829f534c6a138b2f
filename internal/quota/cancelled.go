package quota

import (
	"context"
	"sync"
	"time"
)

// The ledger side of giving a reservation back (docs/reliability.md G1).
// When an apply's INSERT fails in a way that may hide a commit (the
// connection died after it), and the row cannot be read back, the apply
// answers 503 and gives its reservation back in the BalanceStore
// (cancel.lua, a CANCELLED tombstone). That tombstone lives in Redis only:
// if Redis loses it before reconciliation settles the row, the row would come
// back as a live session and be swept as LEAKED — a 503 charged. So the
// service also marks the row CANCELLED in the ledger (Ledger.CancelSession,
// a no-op when the row never landed), retrying in the background while the
// ledger is unreachable; rebuilds, reconciliation and the sweeper take a
// CANCELLED row for settled with nothing charged.

// cancelRetry bounds the background retries of CancelSession: the first
// retry comes after cancelRetryMin, each next one after twice as long, up to
// cancelRetryMax; pending marks are kept up to cancelPendingMax (past it
// the Redis tombstone and reconciliation are what is left, as before).
const (
	cancelRetryMin   = 50 * time.Millisecond
	cancelRetryMax   = 5 * time.Second
	cancelPendingMax = 100_000
	cancelTimeout    = 2 * time.Second
	// closeMarksWait is the default Options.CloseMarksWait.
	closeMarksWait = 3 * time.Second
)

// cancelKey names one attempt of an apply: two attempts of one session id
// have different start times, and each one's row mark is its own.
type cancelKey struct {
	sessionID string
	startMs   int64
}

// cancelMarks holds the CancelSession calls still to be made, by attempt,
// and whether a goroutine drains them. The goroutine ends when none is
// left, so an idle Service holds none.
type cancelMarks struct {
	mu      sync.Mutex
	pending map[cancelKey]UsageRecord
	ids     map[string]int // pending marks per session id (CancelPending)
	running bool
	stopped bool          // Close was called: no new marks are taken
	hurry   chan struct{} // closed when Close starts waiting: retry at once, then every cancelRetryMin
	stop    chan struct{} // closed by Close once it stops waiting: no more marks are made
	idle    chan struct{} // closed when the drain ends; nil while none ran
}

// markCancelled durably marks rec's row CANCELLED (if it landed) after its
// apply gave the reservation back; see the comment at the top of this file.
// It returns at once; the mark is made in the background, and retried while
// the ledger is unavailable.
func (s *Service) markCancelled(rec UsageRecord) {
	rec.Status, rec.EndTime = StatusCancelled, s.opt.Now().UTC().Truncate(time.Millisecond)
	m := &s.cancels
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if m.pending == nil {
		m.pending, m.stop, m.hurry = map[cancelKey]UsageRecord{}, make(chan struct{}), make(chan struct{})
	}
	if m.ids == nil {
		m.ids = map[string]int{}
	}
	key := cancelKey{rec.SessionID, rec.StartTime.UnixMilli()}
	if _, ok := m.pending[key]; !ok {
		if len(m.pending) >= cancelPendingMax {
			return
		}
		m.ids[rec.SessionID]++
	}
	m.pending[key] = rec
	if !m.running {
		m.running, m.idle = true, make(chan struct{})
		go s.drainCancels(m.idle)
	}
}

// drainCancels makes the pending CancelSession calls until none is left.
func (s *Service) drainCancels(idle chan struct{}) {
	defer close(idle)
	m := &s.cancels
	m.mu.Lock()
	stop, hurry := m.stop, m.hurry
	m.mu.Unlock()
	wait := cancelRetryMin
	for {
		m.mu.Lock()
		batch := make([]UsageRecord, 0, len(m.pending))
		for _, rec := range m.pending {
			batch = append(batch, rec)
		}
		m.mu.Unlock()
		for _, rec := range batch {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
			err := GuardErr(s.mysql, func() error { return s.ledger.CancelSession(ctx, rec) })
			cancel()
			if err != nil && isBackendFailure(err) {
				break // the ledger is unreachable: all are retried after the wait
			}
			m.mu.Lock()
			m.done(cancelKey{rec.SessionID, rec.StartTime.UnixMilli()})
			m.mu.Unlock()
		}
		m.mu.Lock()
		if len(m.pending) == 0 {
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		select {
		case <-stop:
			return
		case <-hurry:
			// Close waits for the marks: retry now, then every cancelRetryMin.
			hurry, wait = nil, cancelRetryMin
			continue
		case <-time.After(wait):
		}
		if hurry != nil {
			wait = min(2*wait, cancelRetryMax)
		}
	}
}

// Close stops the background marking of CANCELLED rows: it takes no new
// marks, retries the pending ones every 50 ms for up to
// Options.CloseMarksWait (3 s by default; the ledger may be back within
// it, and every mark made is one that Redis losing its tombstone can no
// longer turn into a charge), then stops the retries and waits for the
// attempt in progress, if any (at most its 2 s deadline). It also drops
// the catch-ups not started yet and waits for those running (catchup.go).
// Marks still not made are left to reconciliation, which settles such a
// row from its Redis tombstone. Call it before closing the ledger; the
// Service answers as before afterwards, without starting new marks. Safe
// to call twice.
func (s *Service) Close() {
	s.stopCatchUps()
	m := &s.cancels
	m.mu.Lock()
	first := !m.stopped
	m.stopped = true
	if first && m.hurry != nil {
		close(m.hurry)
	}
	idle, running := m.idle, m.running
	m.mu.Unlock()
	// CloseMarksWait > 0 as >= 0 is an equivalent mutant: NewService makes
	// 0 the default 3 s, and a timer of 0 fires at once, as not waiting.
	if first && running && idle != nil && s.opt.CloseMarksWait > 0 {
		t := time.NewTimer(s.opt.CloseMarksWait)
		select {
		case <-idle: // every mark made
		case <-t.C:
		}
		t.Stop()
	}
	m.mu.Lock()
	if first && m.stop != nil {
		close(m.stop)
	}
	m.mu.Unlock()
	if running && idle != nil {
		<-idle
	}
}

// done drops the pending mark key; m.mu is held.
func (m *cancelMarks) done(key cancelKey) {
	if _, ok := m.pending[key]; !ok {
		return
	}
	delete(m.pending, key)
	if n := m.ids[key.sessionID]; n > 1 {
		m.ids[key.sessionID] = n - 1
	} else {
		delete(m.ids, key.sessionID) // a no-op on a nil map
	}
}

// CancelPending reports whether this instance answered an apply of
// sessionID (its stored id) 503, gave its reservation back, and has not
// yet marked its ledger row CANCELLED (the ledger did not answer yet).
// Such a row may still read USING; the sweeper must not charge the session
// as LEAKED meanwhile (a rebuild after Redis lost the tombstone brings it
// back as a live session): docs/reliability.md G1.
func (s *Service) CancelPending(sessionID string) bool {
	m := &s.cancels
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[sessionID] > 0
}

// PendingCancels is how many ledger rows of applies answered 503 are still
// to be marked CANCELLED (the ledger was unreachable), and a channel closed
// once the background marking ends (nil when it never ran). For tests and
// the operators' view of an outage.
func (s *Service) PendingCancels() (int, <-chan struct{}) {
	m := &s.cancels
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending), m.idle
}

// revive makes the ledger row of a retried apply rec's own (see
// Ledger.ReviveSession), through the ledger's breaker.
func (s *Service) revive(ctx context.Context, rec UsageRecord) (bool, error) {
	return Guard(s.mysql, func() (bool, error) { return s.ledger.ReviveSession(ctx, rec) })
}
