package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sony/gobreaker/v2"
)

// FallbackMode names what a Manager does on a resource when the center
// cannot answer an apply (see Fallback).
type FallbackMode int

// The fallback modes.
const (
	// ModeFailClosed refuses: Acquire and Do return an *UnavailableError.
	ModeFailClosed FallbackMode = iota + 1
	// ModeFailOpen proceeds without the center: the lease is local
	// (Lease.FailOpen), its usage is remembered and reported when the
	// center answers again, under the same session id, so it is charged
	// exactly once.
	ModeFailOpen
	// ModeFunc calls the caller's function instead (seed 000's fallback
	// response) and returns a *FallbackError.
	ModeFunc
)

func (m FallbackMode) String() string {
	switch m {
	case ModeFailClosed:
		return "fail-closed"
	case ModeFailOpen:
		return "fail-open"
	case ModeFunc:
		return "func"
	}
	return fmt.Sprintf("FallbackMode(%d)", int(m))
}

// FallbackFunc is a caller-supplied fallback: it runs when the center could
// not answer the apply of amount on resource (cause is the
// *UnavailableError), for example to answer from a cache or a cheaper
// service. What it returns is carried in the *FallbackError.
type FallbackFunc func(ctx context.Context, resource string, amount int64, cause error) error

// Fallback is a resource's choice of what happens while the center is away:
// FailClosed(), FailOpen() or Func(fn). The zero Fallback is invalid
// (NewManager refuses it).
type Fallback struct {
	mode FallbackMode
	fn   FallbackFunc
}

// FailClosed refuses while the center is away (the default).
func FailClosed() Fallback { return Fallback{mode: ModeFailClosed} }

// FailOpen proceeds while the center is away and reports the usage later.
// Nothing used is lost while the process lives; with WithFailOpenSpool
// nothing is lost when it dies either (the next Manager on the spool sends
// it), without it a process that exits before the center comes back loses
// what it remembered (Manager.Close says so).
func FailOpen() Fallback { return Fallback{mode: ModeFailOpen} }

// Func runs fn while the center is away.
func Func(fn FallbackFunc) Fallback { return Fallback{mode: ModeFunc, fn: fn} }

// Mode returns the fallback's mode.
func (f Fallback) Mode() FallbackMode { return f.mode }

func (f Fallback) validate() error {
	switch f.mode {
	case ModeFailClosed, ModeFailOpen:
		return nil
	case ModeFunc:
		if f.fn == nil {
			return errors.New("Func fallback with a nil function")
		}
		return nil
	}
	return fmt.Errorf("unknown fallback %v: use FailClosed(), FailOpen() or Func(fn)", f.mode)
}

// ErrFallbackTaken matches (errors.Is) every *FallbackError.
var ErrFallbackTaken = errors.New("quota-center client: fallback taken")

// FallbackError says a Func fallback ran instead of the guarded work
// because the center could not answer. Err is what the fallback function
// returned (nil when it served the request); Cause is the
// *UnavailableError.
type FallbackError struct {
	Resource string
	Amount   int64
	Cause    error
	Err      error
}

func (e *FallbackError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("quota-center client: %s: fallback taken (%v) and failed: %v", e.Resource, e.Cause, e.Err)
	}
	return fmt.Sprintf("quota-center client: %s: fallback taken (%v)", e.Resource, e.Cause)
}

// Unwrap returns the cause and the fallback's own error.
func (e *FallbackError) Unwrap() []error { return []error{e.Cause, e.Err} }

// Is makes errors.Is(err, ErrFallbackTaken) true.
func (e *FallbackError) Is(target error) bool { return target == ErrFallbackTaken }

// report is usage the center has not taken yet: a session to open
// (apply > 0: a fail-open lease) and settle with used.
type report struct {
	resource  string
	sessionID string
	apply     int64 // amount to apply first; 0 = the session exists at the center
	used      int64
	orphan    bool // an apply whose answer was lost: unknown to the center is fine
}

// pending holds reports until the center takes them. It lives in memory,
// and also in the spool when the Manager has one (WithFailOpenSpool);
// without a spool the usage of a process that dies before the center
// answers is lost.
type pending struct {
	m  *Manager
	mu sync.Mutex
	q  []report
	fl sync.Mutex // one flush at a time
}

func newPending(m *Manager) *pending { return &pending{m: m} }

// add remembers r, first in the spool (fsynced) when there is one.
func (p *pending) add(r report) {
	p.m.spool.record(spoolRecord{Op: spoolReport, ID: r.sessionID, Resource: r.resource, Apply: r.apply, Used: r.used, Orphan: r.orphan})
	p.addLoaded(r)
}

// addLoaded remembers reports that are in the spool already.
func (p *pending) addLoaded(rs ...report) {
	if len(rs) == 0 {
		return
	}
	p.mu.Lock()
	p.q = append(p.q, rs...)
	n := len(p.q)
	p.mu.Unlock()
	p.m.met.pending.Set(float64(n))
}

func (p *pending) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.q)
}

// flush sends the reports in order until one fails because the center is
// away (the rest wait for the next flush). A report the center refuses for
// good (the session is unknown, e.g. past the finished-session retention)
// is dropped, logged and counted. A fail-open report is sent as an apply of
// its usage (minAmount 1, so that a nearly spent period still takes it)
// followed by a finish with the usage, both under the lease's session id:
// repeats return the first answers, so it is charged exactly once. While
// the resource has nothing left (429) it waits, to be charged when quota
// frees up or the period resets, like the debt of CockroachDB's tenant
// token bucket.
//
// While the breaker is open, the first report goes to the center as a probe,
// past the breaker: if the center answers it, the breaker closes at once
// (Manager.probeOK) and the rest follow, so fail-open usage and new calls do
// not wait out the breaker's open time once the center is back (issue 22,
// item 7). Reports wait at most one report interval, and Close's last send
// is such a probe too.
//
// It returns the error that stopped it with reports left (the center away,
// ctx's end, or the resource exhausted), nil once none is left.
func (p *pending) flush(ctx context.Context) error {
	p.fl.Lock()
	defer p.fl.Unlock()
	for {
		p.mu.Lock()
		if len(p.q) == 0 {
			p.mu.Unlock()
			return nil
		}
		r := p.q[0]
		p.mu.Unlock()
		b := p.m.breaker.Load()
		probe := b.State() == gobreaker.StateOpen
		err := p.m.deliver(withProbe(ctx, probe), r)
		if r.orphan && errors.Is(err, ErrSessionNotFound) {
			err = nil // the apply never arrived: nothing to settle
		}
		if probe && !isCenterFailure(err) && ctx.Err() == nil {
			p.m.probeOK(b)
		}
		if err != nil && (errors.Is(err, ErrUnavailable) || errors.Is(err, ErrQuotaExhausted) || ctx.Err() != nil) {
			if ctx.Err() != nil {
				return fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
			return err
		}
		result := "delivered"
		if err != nil {
			result = "dropped"
			p.m.log.Error("quota-center client: usage report dropped", "resource", r.resource, "session", r.sessionID, "used", r.used, "err", err)
		}
		p.m.met.reports.WithLabelValues(result).Inc()
		p.m.spool.record(spoolRecord{Op: spoolDone, ID: r.sessionID})
		p.mu.Lock()
		p.q = p.q[1:]
		n := len(p.q)
		p.mu.Unlock()
		p.m.met.pending.Set(float64(n))
	}
}

// deliver sends one report.
func (m *Manager) deliver(ctx context.Context, r report) error {
	if r.apply > 0 {
		err := m.callResource(ctx, "apply", r.resource, func(ctx context.Context) error {
			_, err := m.c.Apply(ctx, ApplyRequest{ResourceName: r.resource, ApplyAmount: r.apply, MinAmount: 1, ClientID: m.cfg.clientID, SessionID: r.sessionID})
			return err
		})
		if err != nil && !errors.Is(err, ErrSessionNotActive) {
			return err
		}
		// SESSION_NOT_ACTIVE: a replay of a report the center took
		// already (finished, or swept as leaked); the finish below gets
		// the first settlement back, or says it is settled.
	}
	err := m.callResource(ctx, "finish", r.resource, func(ctx context.Context) error {
		_, err := m.c.Finish(ctx, FinishRequest{ResourceName: r.resource, SessionID: r.sessionID, ClientID: m.cfg.clientID, ActualUsedAmount: r.used})
		return err
	})
	if r.apply > 0 && errors.Is(err, ErrSessionNotActive) {
		return nil // a replayed report whose session the center settled already
	}
	return err
}

// probeKey marks a context whose calls go past the breaker (withProbe).
type probeKey struct{}

// withProbe is ctx with its calls sent past the breaker when probe is set:
// the probe of pending.flush.
func withProbe(ctx context.Context, probe bool) context.Context {
	if !probe {
		return ctx
	}
	return context.WithValue(ctx, probeKey{}, true)
}

// isProbe reports whether ctx's calls go past the breaker.
func isProbe(ctx context.Context) bool { v, _ := ctx.Value(probeKey{}).(bool); return v }
