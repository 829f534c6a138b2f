package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// ErrLeaseEnded is returned by Lease.Finish when the lease was already
// ended another way (its context was cancelled, the leak guard fired, the
// center said it leaked, the Manager closed) and the caller's usage differs
// from what was reported then. errors.As gives the *LeaseEndedError.
var ErrLeaseEnded = errors.New("quota-center client: lease already ended")

// LeaseEndedError says how a lease ended before Finish.
type LeaseEndedError struct {
	SessionID string
	Reason    string // "cancelled", "leak guard", "leaked", "manager closed"
	Reported  int64  // the usage reported then
}

func (e *LeaseEndedError) Error() string {
	return fmt.Sprintf("quota-center client: lease %s already ended (%s) with usage %d", e.SessionID, e.Reason, e.Reported)
}

// Is makes errors.Is(err, ErrLeaseEnded) true.
func (e *LeaseEndedError) Is(target error) bool { return target == ErrLeaseEnded }

// endReason is why a lease ended without its owner's Finish.
type endReason int

const (
	endFinished endReason = iota
	endCancelled
	endLeakGuard
	endLeaked
)

func (r endReason) String() string {
	return [...]string{"finished", "cancelled", "leak guard", "leaked"}[r]
}

// Lease is one session opened by Acquire: Granted units of a resource,
// kept alive by heartbeats at the center's heartbeatIntervalSeconds until
// Finish. Its methods are safe for concurrent use.
type Lease struct {
	m          *Manager
	resource   string
	sessionID  string
	granted    int64
	qtype      QuotaType
	failOpen   bool
	started    time.Time
	drawn      *Drawn
	quotaTight bool

	ctx    context.Context // Done when the lease ends
	cancel context.CancelFunc
	hbDone chan struct{}
	guard  *time.Timer

	onVersion func(string) // LocalPool: policy version of each answer
	onLost    func()       // LocalPool: the center ended the session (swept as leaked)

	mu       sync.Mutex
	used     int64 // Lease.Use so far; -1 = never set
	version  string
	ended    bool
	reason   endReason
	reported int64
	finish   *FinishResponse
}

// SessionID returns the session id (a UUIDv7 the client made).
func (l *Lease) SessionID() string { return l.sessionID }

// Granted returns the amount granted, in the policy's unit.
func (l *Lease) Granted() int64 { return l.granted }

// FailOpen reports whether the lease was granted locally by a FailOpen
// fallback because the center could not answer: its usage is reported when
// the center is back.
func (l *Lease) FailOpen() bool { return l.failOpen }

// Drawn returns where the grant came from (dedicated part, shared pool,
// buffer, temporary grants), or nil on a resource without business lines
// or grants, and on a fail-open lease.
func (l *Lease) Drawn() *Drawn { return l.drawn }

// QuotaTight reports whether the center said the line's quota is tight
// (buffer lent to it): degrade non-critical work.
func (l *Lease) QuotaTight() bool { return l.quotaTight }

// PolicyVersion returns the policy version of the last apply or heartbeat
// answer ("" from a server that sends none, or on a fail-open lease).
func (l *Lease) PolicyVersion() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

// Context returns a context that is done when the lease ends (finished,
// cancelled, leak guard, or leaked at the center): work guarded by the
// lease can stop then.
func (l *Lease) Context() context.Context { return l.ctx }

// Use records the usage so far (in the policy's unit), which is what a
// cancelled context reports for a lease of a non-DURATION resource.
func (l *Lease) Use(used int64) {
	l.mu.Lock()
	l.used = used
	l.mu.Unlock()
}

// AcquireOption adjusts one Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	minAmount    int64
	line         string
	nonCritical  bool
	continuation bool
	noGuard      bool // LocalPool batches: the pool decides when they end
	noFallback   bool // LocalPool batches: the pool has its own outage mode
	detached     bool // LocalPool batches: ctx bounds the apply only, not the lease
}

// MinAmount allows a partial grant of at least min units when the whole
// amount does not fit (the apply's minAmount).
func MinAmount(min int64) AcquireOption { return func(c *acquireConfig) { c.minAmount = min } }

// BusinessLine charges the business line line on a resource with lines
// (the apply's businessLine; see docs/pools.md). Required there, refused
// with ErrInvalidArgument elsewhere.
func BusinessLine(line string) AcquireOption { return func(c *acquireConfig) { c.line = line } }

// NonCritical marks a preview or debug call ("critical": false): a line
// above its watermark refuses it first.
func NonCritical() AcquireOption { return func(c *acquireConfig) { c.nonCritical = true } }

// Continuation marks more work for a running conversation or job: a
// watermark never refuses it.
func Continuation() AcquireOption { return func(c *acquireConfig) { c.continuation = true } }

// Acquire applies for amount of resource and returns a Lease that heartbeats
// in the background until Finish. The session id is made here (UUIDv7), so
// the retries of the apply are one apply. When ctx is cancelled before
// Finish, the lease finishes itself with the usage so far: the elapsed
// seconds (rounded up) on a DURATION resource, else the last Lease.Use, or
// the whole grant when Use was never called. The local leak guard finishes
// a lease still open after amount seconds (DURATION) plus the grace of
// WithLeakGuard, or the grace alone on other units, with the whole grant.
//
// Errors: the server's *Error (ErrQuotaExhausted, ErrResourceNotFound, …);
// when the center cannot answer, what the resource's Fallback says: an
// *UnavailableError (FailClosed), a fail-open Lease and no error
// (FailOpen), or a *FallbackError (Func); ErrManagerClosed.
func (m *Manager) Acquire(ctx context.Context, resource string, amount int64, opts ...AcquireOption) (*Lease, error) {
	var ac acquireConfig
	for _, o := range opts {
		o(&ac)
	}
	return m.acquire(ctx, resource, amount, ac)
}

func (m *Manager) acquire(ctx context.Context, resource string, amount int64, ac acquireConfig) (*Lease, error) {
	if m.isClosed() {
		return nil, ErrManagerClosed
	}
	req := ApplyRequest{ResourceName: resource, ApplyAmount: amount, MinAmount: ac.minAmount, ClientID: m.cfg.clientID, SessionID: newSessionID(),
		BusinessLine: ac.line, Continuation: ac.continuation}
	if ac.nonCritical {
		no := false
		req.Critical = &no
	}
	var resp *ApplyResponse
	localOpen := false
	err := m.callResource(ctx, "apply", resource, func(ctx context.Context) error {
		var err error
		resp, err = m.c.Apply(ctx, req)
		return err
	})
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		var ue *UnavailableError
		if errors.As(err, &ue) && ue.Tries > 0 && !neverSent(ue.Err) {
			// The apply may have reached the center before the answer was
			// lost: settle that session with 0 once the center answers, so
			// that it is not charged whole by the leak sweeper.
			m.pending.add(report{resource: resource, sessionID: req.SessionID, orphan: true})
		}
		if ac.noFallback {
			return nil, err
		}
		fb := m.fallbackFor(resource)
		m.met.fallbacks.WithLabelValues(resource, fb.mode.String()).Inc()
		m.log.Warn("quota-center client: center unavailable, fallback", "resource", resource, "mode", fb.mode.String(), "err", err)
		switch fb.mode {
		case ModeFailOpen:
			// A fresh id: the report must not collide with the apply that
			// may have reached the center under req.SessionID.
			req.SessionID = newSessionID()
			resp, localOpen = &ApplyResponse{SessionID: req.SessionID, GrantedAmount: amount}, true
			// Should the process die with the lease open, the next
			// Manager on the spool charges its whole grant.
			m.spool.record(spoolRecord{Op: spoolOpen, ID: req.SessionID, Resource: resource, Apply: amount})
		case ModeFunc:
			return nil, &FallbackError{Resource: resource, Amount: amount, Cause: err, Err: fb.fn(ctx, resource, amount, err)}
		default:
			return nil, err
		}
	}
	l := &Lease{
		m: m, resource: resource, sessionID: req.SessionID, granted: resp.GrantedAmount,
		failOpen: localOpen, started: m.cfg.now(), used: -1, version: resp.PolicyVersion, hbDone: make(chan struct{}),
		drawn: resp.Drawn, quotaTight: resp.QuotaTight,
	}
	l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if !l.failOpen && !ac.detached { // LocalPool batches need no unit
		l.qtype = m.quotaType(ctx, resource)
	}
	if !m.track(l) {
		l.cancel()
		close(l.hbDone)
		if !l.failOpen {
			_, _ = l.report(context.Background(), 0)
		} else {
			m.spool.record(spoolRecord{Op: spoolDone, ID: l.sessionID})
		}
		return nil, ErrManagerClosed
	}
	if !ac.noGuard {
		limit := m.cfg.leakGrace
		if l.qtype == QuotaTypeDuration {
			limit += time.Duration(amount) * time.Second
		}
		l.mu.Lock()
		l.guard = time.AfterFunc(limit, func() { l.end(endLeakGuard) })
		l.mu.Unlock()
	}
	interval := time.Duration(resp.HeartbeatIntervalSeconds) * time.Second
	if interval <= 0 {
		interval = defaultHeartbeatSeconds * time.Second
	}
	if l.failOpen {
		close(l.hbDone)
	} else {
		go l.heartbeat(interval)
	}
	if !ac.detached {
		go func() { // the caller's cancellation ends the lease with its usage so far
			select {
			case <-ctx.Done():
				l.end(endCancelled)
			case <-l.ctx.Done():
			}
		}()
	}
	return l, nil
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// track registers a live lease so that Close can end it; false once closed.
func (m *Manager) track(l *Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.leases[l] = struct{}{}
	return true
}

func (m *Manager) untrack(l *Lease) {
	m.mu.Lock()
	delete(m.leases, l)
	m.mu.Unlock()
}

// heartbeat keeps the session alive every interval until the lease ends. A
// heartbeat the center cannot take is tried again at the next tick; a
// SESSION_NOT_ACTIVE answer (the center swept it as leaked) ends the lease.
func (l *Lease) heartbeat(interval time.Duration) {
	defer close(l.hbDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, interval)
		var resp *HeartbeatResponse
		err := l.m.callResource(ctx, "heartbeat", l.resource, func(ctx context.Context) error {
			var err error
			resp, err = l.m.c.Heartbeat(ctx, HeartbeatRequest{ResourceName: l.resource, SessionID: l.sessionID, ClientID: l.m.cfg.clientID})
			return err
		})
		cancel()
		switch {
		case err == nil:
			l.setVersion(resp.PolicyVersion)
		case errors.Is(err, ErrSessionNotActive), errors.Is(err, ErrSessionNotFound):
			l.m.log.Error("quota-center client: session ended at the center", "resource", l.resource, "session", l.sessionID, "err", err)
			l.mu.Lock()
			lost := l.onLost
			l.mu.Unlock()
			if lost != nil {
				lost() // the pool stops serving the batch and finishes it with what it handed out (a late finish trues it up)
			} else {
				go l.end(endLeaked)
			}
			return
		}
	}
}

func (l *Lease) setVersion(v string) {
	l.mu.Lock()
	changed := v != "" && v != l.version
	if changed {
		l.version = v
	}
	cb := l.onVersion
	l.mu.Unlock()
	if changed && cb != nil {
		cb(v)
	}
}

// usageSoFar is what a lease ended by cancellation reports.
func (l *Lease) usageSoFar() int64 {
	if l.qtype == QuotaTypeDuration {
		return elapsedSeconds(l.m.cfg.now().Sub(l.started))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used >= 0 {
		return l.used
	}
	return l.granted
}

// elapsedSeconds rounds d up to whole seconds (a started second is used).
func elapsedSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// end ends the lease without its owner's Finish.
func (l *Lease) end(r endReason) {
	used := l.granted
	if r == endCancelled {
		used = l.usageSoFar()
	}
	if r == endLeakGuard {
		l.m.met.leakGuard.WithLabelValues(l.resource).Inc()
		l.m.log.Error("quota-center client: lease not finished in time, finishing it with its whole grant (leak guard)",
			"resource", l.resource, "session", l.sessionID, "granted", l.granted)
	}
	_, _ = l.finishWith(context.Background(), used, r)
}

// Finish settles the lease with used (in the policy's unit; more than
// Granted is charged as overage) and stops its heartbeats. When the center
// cannot take the finish now, the usage is remembered and reported later
// (Manager.PendingReports) and Finish returns nil with a nil response. A
// repeated Finish with the same used returns the first answer. After the
// lease ended another way, Finish with another amount returns a
// *LeaseEndedError (ErrLeaseEnded). ctx's values are kept but not its
// cancellation: the finish is sent even when ctx is done, within the
// Manager's own bound (tries × (connect + read timeout + retry wait)).
func (l *Lease) Finish(ctx context.Context, used int64) (*FinishResponse, error) {
	if used < 0 {
		return nil, fmt.Errorf("quota-center client: Finish: negative usage %d", used)
	}
	return l.finishWith(ctx, used, endFinished)
}

func (l *Lease) finishWith(ctx context.Context, used int64, r endReason) (*FinishResponse, error) {
	l.mu.Lock()
	if l.ended {
		fr, reported, reason := l.finish, l.reported, l.reason
		l.mu.Unlock()
		if r == endFinished && (reason != endFinished || reported != used) {
			return fr, &LeaseEndedError{SessionID: l.sessionID, Reason: reason.String(), Reported: reported}
		}
		return fr, nil
	}
	l.ended, l.reason, l.reported = true, r, used
	guard := l.guard
	l.mu.Unlock()
	if guard != nil {
		guard.Stop()
	}
	l.cancel()
	<-l.hbDone
	defer l.m.untrack(l)
	if l.failOpen {
		if used > 0 {
			l.m.pending.add(report{resource: l.resource, sessionID: l.sessionID, apply: used, used: used})
		} else {
			l.m.spool.record(spoolRecord{Op: spoolDone, ID: l.sessionID})
		}
		return nil, nil
	}
	return l.report(ctx, used)
}

// report sends the finish; when the center cannot take it, it is kept for
// later.
func (l *Lease) report(ctx context.Context, used int64) (*FinishResponse, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.m.finishBudget())
	defer cancel()
	var fr *FinishResponse
	err := l.m.callResource(ctx, "finish", l.resource, func(ctx context.Context) error {
		var err error
		fr, err = l.m.c.Finish(ctx, FinishRequest{ResourceName: l.resource, SessionID: l.sessionID, ClientID: l.m.cfg.clientID, ActualUsedAmount: used})
		return err
	})
	if err != nil && (errors.Is(err, ErrUnavailable) || ctx.Err() != nil) {
		l.m.pending.add(report{resource: l.resource, sessionID: l.sessionID, used: used})
		return nil, nil
	}
	l.mu.Lock()
	l.finish = fr
	l.mu.Unlock()
	return fr, err
}

// neverSent says whether err shows the request never reached the center
// (the connection could not be made), so no session can have been opened.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// finishBudget bounds one finish with its retries.
func (m *Manager) finishBudget() time.Duration {
	per := m.cfg.connectTimeout + m.cfg.readTimeout
	return time.Duration(m.cfg.retryAttempts)*per + m.cfg.retryMax*time.Duration(m.cfg.retryAttempts)
}
