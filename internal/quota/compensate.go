package quota

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Compensation of refused applies (issue 11 §3.1). An apply whose call to
// the BalanceStore failed (a timeout: Redis paused, a reply lost) is
// answered 503, yet its script may have run, or may still run: a paused
// Redis runs the commands queued on its sockets when it resumes. That
// reservation has no ledger row and would count as reserved until its
// lease ran out and QC_RECONCILE_GRACE passed (the sweeper then gives it
// back). The Service remembers such attempts and, as soon as the store
// answers again, gives back what each one reserved (Compensate, keyed by
// the attempt's token): only if the session is still that attempt's alone.
// A retry of the same apply either found the tombstone and started afresh,
// or replayed the session first (which takes the attempt's key off it) and
// writes its row on a reservation nobody will take back. A balance rebuilt
// since without the session (a failover's repair) loses nothing.
const (
	// compensateTick is how often the pending attempts are tried.
	compensateTick = 200 * time.Millisecond
	// compensateAbsentFor is how long an attempt whose session is absent
	// is tried again after the store first answered: its script may still
	// be queued behind the outage (Redis runs what its sockets hold when it
	// resumes, in no set order with newer connections).
	compensateAbsentFor = 3 * time.Second
	// compensateMaxAge drops an attempt the store never answered for; the
	// sweeper gives such a reservation back after its lease and the grace.
	compensateMaxAge = 10 * time.Minute
	// compensateMaxPending bounds the attempts remembered; beyond it new
	// ones are left to the sweeper.
	compensateMaxPending = 10000
	// compensateCallTimeout bounds one Compensate call.
	compensateCallTimeout = time.Second
)

// pendingAttempt is an apply attempt to compensate.
type pendingAttempt struct {
	resource, sessionID, attempt string
	added                        time.Time
	absentSince                  time.Time // first answer "absent"; zero before
	givenBack                    func()    // runs once the reservation was given back; nil: nothing
}

// compensations holds the pending attempts of a Service.
type compensations struct {
	mu      sync.Mutex
	pending []pendingAttempt
	wake    chan struct{} // buffered 1: an attempt was added
}

// mayHaveRun reports whether a failed store call may have run all the same
// (its answer was lost or late): a backend failure other than an open
// breaker (which sends nothing), or the caller's deadline or cancellation.
func mayHaveRun(err error) bool {
	if errors.Is(err, ErrCircuitOpen) || errors.Is(err, ErrSessionConflict) {
		return false
	}
	return errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled)
}

// compensateLater remembers an apply attempt answered with an error, to
// give its reservation back once the store answers (RunCompensation).
// Pools' applies are compensated too: their sessions carry the attempt
// (pool_apply.lua), and the give-back returns the grant to the pools it
// drew from. Fail-open policies (their grant is answered 200 with a ledger
// row) are not compensated. givenBack, when not nil, runs once the
// reservation was given back.
func (s *Service) compensateLater(pol Policy, cmd ApplyCmd, givenBack func()) {
	if cmd.Attempt == "" || pol.FailMode == FailOpen {
		return
	}
	c := &s.comp
	c.mu.Lock()
	if len(c.pending) < compensateMaxPending {
		c.pending = append(c.pending, pendingAttempt{
			resource: cmd.ResourceName, sessionID: cmd.SessionID, attempt: cmd.Attempt, added: s.opt.Now(),
			givenBack: givenBack,
		})
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// PendingCompensations is how many refused applies wait for their
// reservation to be given back.
func (s *Service) PendingCompensations() int {
	s.comp.mu.Lock()
	defer s.comp.mu.Unlock()
	return len(s.comp.pending)
}

// RunCompensation gives back the reservations of refused applies
// (compensateLater) until ctx ends; it returns nil then. Calls go through
// the BalanceStore's breaker, so while it is open nothing is sent.
func (s *Service) RunCompensation(ctx context.Context) error {
	t := time.NewTicker(compensateTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.comp.wake:
		}
		s.compensatePending(ctx)
	}
}

// compensatePending tries every pending attempt once and keeps those that
// are not settled.
func (s *Service) compensatePending(ctx context.Context) {
	c := &s.comp
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	keep := batch[:0]
	down := false
	for _, p := range batch {
		now := s.opt.Now()
		if now.Sub(p.added) > compensateMaxAge {
			continue
		}
		if down || ctx.Err() != nil {
			keep = append(keep, p)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, compensateCallTimeout)
		out, err := Guard(s.redisFor(p.resource), func() (CompensateOutcome, error) {
			return s.balances.Compensate(cctx, p.resource, p.sessionID, p.attempt)
		})
		cancel()
		switch {
		case err != nil:
			down = true // the store is not back: try the rest next tick
			keep = append(keep, p)
		case out == CompensateGivenBack:
			if p.givenBack != nil {
				p.givenBack()
			}
		case out == CompensateAbsent:
			if p.absentSince.IsZero() {
				p.absentSince = now
			}
			if now.Sub(p.absentSince) < compensateAbsentFor {
				keep = append(keep, p)
			}
		}
	}
	c.mu.Lock()
	c.pending = append(keep, c.pending...)
	c.mu.Unlock()
}
