package sweeper

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Policies lists the resources to sweep.
type Policies interface {
	ListPolicies(ctx context.Context) ([]quota.Policy, error)
}

// Store is the part of the balance store the sweeper uses.
type Store interface {
	// SweepHeld moves up to max expired sessions that held reports true
	// for to LEAKED (and reports unacknowledged earlier ones); the expired
	// sessions held reports false for are left alone and returned as
	// orphans.
	SweepHeld(ctx context.Context, resource string, max int, retention time.Duration,
		held func(ids []string) (map[string]bool, error)) (leaks []quota.LeakedSession, orphans []string, err error)
	AckLeaks(ctx context.Context, resource string, sessionIDs []string) error
	// Sessions reads sessions by id (absent ids are missing from the map).
	Sessions(ctx context.Context, resource string, ids []string) (map[string]quota.SessionState, error)
	// Cancel gives back a USING reservation, leaving a CANCELLED tombstone.
	Cancel(ctx context.Context, resource, sessionID string) error
}

// Ledger is the part of the ledger the sweeper uses.
type Ledger interface {
	MarkLeaked(ctx context.Context, leaks []quota.LeakedSession) error
	// SessionsByID reads ledger rows by session id (absent ids are missing).
	SessionsByID(ctx context.Context, ids []string) (map[string]quota.UsageRecord, error)
}

// Config tunes a Sweeper.
type Config struct {
	Interval  time.Duration // between passes
	Batch     int           // sessions per sweep call
	Retention time.Duration // how long a LEAKED session stays in Redis for a late finish to true it up
	// OrphanGrace: an expired reservation without a ledger row (its apply
	// was refused, e.g. a script that ran after its caller timed out) is
	// never charged as LEAKED; once it started this long ago (its ledger
	// write, if any, can no longer be on its way) it is given back
	// (QC_RECONCILE_GRACE). 0 leaves it to reconciliation.
	OrphanGrace time.Duration
	Breakers    quota.Breakers // guard the calls to the stores; nil ones let every call through
	// OnPolicy, when set, is called with every policy at the start of each
	// pass: the service creates its per-resource metric series at 0 for
	// policies that appeared on another instance.
	OnPolicy func(quota.Policy)
	// Refused, when set, says that this instance answered the session's
	// apply 503 and has not yet marked its ledger row CANCELLED
	// (quota.Service.CancelPending): the session is never charged as
	// LEAKED, even while its row still reads USING (docs/reliability.md G1).
	Refused func(sessionID string) bool
	// Visits, when set, says which resources to sweep in a pass: those
	// changed since their last clean sweep, those whose earliest lease
	// has run out since, and every one at least once per its full-visit
	// interval (activity.Visits; issue 23 §1: a used resource that is
	// quiet costs no Redis command per pass). nil: every resource, every
	// pass. It needs a Store with SweepHeldNext (the lease times);
	// with another Store every resource is swept each pass.
	Visits Visits
}

// Visits is what the sweeper needs of activity.Visits.
type Visits interface {
	// Due returns the resources of names to sweep now and the start to
	// pass to Done.
	Due(ctx context.Context, names []string) ([]string, time.Time)
	// Done records a clean sweep of resource begun at start; next ≥ 0:
	// sweep it again after next even without a change.
	Done(resource string, start time.Time, next time.Duration)
}

// NextStore is a Store that also tells when the earliest lease still
// running ends (redisstore.Store.SweepHeldNext): next < 0 when none.
type NextStore interface {
	SweepHeldNext(ctx context.Context, resource string, max int, retention time.Duration,
		held func(ids []string) (map[string]bool, error)) (leaks []quota.LeakedSession, orphans []string, next time.Duration, err error)
}

// Sweeper runs the leak sweep on an interval.
type Sweeper struct {
	cfg      Config
	policies Policies
	store    Store
	ledger   Ledger
	log      *zap.Logger
	leaked   *prometheus.CounterVec
	orphans  *prometheus.CounterVec
	errors   prometheus.Counter
	negative prometheus.Counter
	duration prometheus.Histogram
}

// New builds a Sweeper and registers its metrics on reg:
// quota_sessions_leaked_total{resource}, quota_sweep_errors_total and
// quota_sweep_duration_seconds.
func New(cfg Config, p Policies, s Store, l Ledger, log *zap.Logger, reg prometheus.Registerer) *Sweeper {
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	f := promauto.With(reg)
	return &Sweeper{
		cfg: cfg, policies: p, store: s, ledger: l, log: log,
		leaked: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_sessions_leaked_total", Help: "Sessions marked LEAKED by the sweeper (lease expired without a finish).",
		}, []string{"resource"}),
		orphans: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_sweep_orphans_released_total", Help: "Expired reservations without a ledger row (a refused apply) given back by the sweeper instead of charged.",
		}, []string{"resource"}),
		errors: f.NewCounter(prometheus.CounterOpts{
			Name: "quota_sweep_errors_total", Help: "Sweep passes or steps that failed (retried on the next pass).",
		}),
		negative: f.NewCounter(prometheus.CounterOpts{
			Name: "quota_sweep_negative_refused_total",
			Help: "Sweep steps the balance store refused because a give-back would leave a balance's reserved below zero (also in quota_sweep_errors_total).",
		}),
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Name: "quota_sweep_duration_seconds", Help: "Duration of one sweep pass over all resources.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
}

// known creates each policy's leak counter at 0 and passes the policy to
// Config.OnPolicy: a series that exists at 0 before the first leak lets
// increase() count that leak (a series born at 1 hides it).
func (s *Sweeper) known(pols []quota.Policy) {
	for _, p := range pols {
		s.leaked.WithLabelValues(p.ResourceName)
		if s.cfg.OnPolicy != nil {
			s.cfg.OnPolicy(p)
		}
	}
}

// Run sweeps every Interval until ctx is done; it returns nil on a clean stop.
// Before the first pass it creates the known policies' series at 0.
func (s *Sweeper) Run(ctx context.Context) error {
	if pols, err := s.policies.ListPolicies(ctx); err == nil {
		s.known(pols)
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.SweepOnce(ctx)
		}
	}
}

// SweepOnce runs one pass over every resource and returns how many sessions
// it moved to LEAKED. Failures are logged, counted, and retried next pass.
func (s *Sweeper) SweepOnce(ctx context.Context) int {
	start := time.Now()
	defer func() { s.duration.Observe(time.Since(start).Seconds()) }()
	pols, err := quota.Guard(s.cfg.Breakers.Ledger, func() ([]quota.Policy, error) { return s.policies.ListPolicies(ctx) })
	if err != nil {
		s.fail("list policies", "", err)
		return 0
	}
	total := 0
	s.known(pols)
	names := make([]string, len(pols))
	for i, p := range pols {
		names[i] = p.ResourceName
	}
	var visitStart time.Time
	ns, timed := s.store.(NextStore)
	if s.cfg.Visits != nil && timed {
		names, visitStart = s.cfg.Visits.Due(ctx, names)
	}
	for _, r := range names {
		clean := true
		var next time.Duration
		for ctx.Err() == nil {
			n, more, c, nx := s.sweepResource(ctx, r, ns)
			total += n
			clean, next = clean && c, nx
			if !more {
				break
			}
		}
		if clean && ctx.Err() == nil && s.cfg.Visits != nil && timed {
			s.cfg.Visits.Done(r, visitStart, next)
		}
	}
	return total
}

// sweepResource runs one sweep call; more reports a full batch of fresh
// leaks (there may be more expired sessions waiting). clean reports a call
// that found nothing to do and failed nowhere (the resource may then be
// skipped until it changes or next passes: see Config.Visits); next is
// when the earliest running lease ends (negative: none, or unknown without
// ns).
func (s *Sweeper) sweepResource(ctx context.Context, resource string, ns NextStore) (fresh int, more, clean bool, next time.Duration) {
	var orphans []string
	var heldErr error // the ledger's: not the Redis breaker's to judge
	next = -1
	leaks, err := quota.Guard(s.cfg.Breakers.BalancesFor(resource), func() ([]quota.LeakedSession, error) {
		held := func(ids []string) (map[string]bool, error) {
			h, err := s.held(ctx, resource, ids)
			if err != nil {
				heldErr = err
				return nil, errLedgerCheck
			}
			return h, nil
		}
		if ns != nil {
			l, o, nx, err := ns.SweepHeldNext(ctx, resource, s.cfg.Batch, s.cfg.Retention, held)
			orphans, next = o, nx
			return l, err
		}
		l, o, err := s.store.SweepHeld(ctx, resource, s.cfg.Batch, s.cfg.Retention, held)
		orphans = o
		return l, err
	})
	if len(orphans) > 0 {
		s.releaseOrphans(ctx, resource, orphans)
	}
	if heldErr != nil {
		err = heldErr
	}
	if err != nil {
		s.fail("sweep", resource, err)
		return 0, false, false, -1
	}
	if len(leaks) == 0 {
		// Orphans wait for their grace (or for reconciliation): look again
		// next pass.
		return 0, false, len(orphans) == 0, next
	}
	for _, l := range leaks {
		if l.Fresh {
			fresh++
			s.log.Info("session leaked", zap.String("resource", resource), zap.String("client_id", l.ClientID),
				zap.String("session_id", l.SessionID), zap.Int64("granted", l.Granted))
		}
	}
	s.leaked.WithLabelValues(resource).Add(float64(fresh))
	if err := quota.GuardErr(s.cfg.Breakers.Ledger, func() error { return s.ledger.MarkLeaked(ctx, leaks) }); err != nil {
		s.fail("mark leaked", resource, err)
		return fresh, false, false, -1
	}
	ids := make([]string, len(leaks))
	for i, l := range leaks {
		ids[i] = l.SessionID
	}
	if err := quota.GuardErr(s.cfg.Breakers.BalancesFor(resource), func() error { return s.store.AckLeaks(ctx, resource, ids) }); err != nil {
		s.fail("ack leaks", resource, err)
		return fresh, false, false, -1
	}
	// Leaks were swept: the balance changed; look again next pass.
	return fresh, fresh >= s.cfg.Batch, false, -1
}

// errLedgerCheck stands for a failed ledger check inside a Redis call, so
// that the Redis breaker does not count the ledger's failure.
var errLedgerCheck = errors.New("sweep: ledger check failed")

// held reports which of the expired sessions ids the sweep may charge as
// LEAKED: those with a ledger row that is not CANCELLED (their apply was
// answered 200, which comes only after the row is durable) and fail-open grants (answered without a
// row; reconciliation writes it). A reservation with neither was never
// granted to anyone (issue 11 §3.1).
func (s *Sweeper) held(ctx context.Context, resource string, ids []string) (map[string]bool, error) {
	rows, err := quota.Guard(s.cfg.Breakers.Ledger, func() (map[string]quota.UsageRecord, error) {
		return s.ledger.SessionsByID(ctx, ids)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	var missing []string
	for _, id := range ids {
		// A CANCELLED row is an apply answered 503 whose reservation was
		// to be given back: never charged (docs/reliability.md G1).
		refused := s.cfg.Refused != nil && s.cfg.Refused(id)
		if r, ok := rows[id]; ok && r.ResourceName == resource && r.Status != quota.StatusCancelled && !refused {
			out[id] = true
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		states, err := s.store.Sessions(ctx, resource, missing)
		if err != nil {
			return nil, err
		}
		for _, id := range missing {
			out[id] = states[id].FailOpen
		}
	}
	return out, nil
}

// releaseOrphans gives back the expired reservations without a ledger row
// that started more than OrphanGrace ago; younger ones stay reserved (their
// row may still be on its way) until a later pass.
func (s *Sweeper) releaseOrphans(ctx context.Context, resource string, ids []string) {
	if s.cfg.OrphanGrace <= 0 {
		return
	}
	states, err := quota.Guard(s.cfg.Breakers.BalancesFor(resource), func() (map[string]quota.SessionState, error) {
		return s.store.Sessions(ctx, resource, ids)
	})
	if err != nil {
		s.fail("read orphans", resource, err)
		return
	}
	for _, id := range ids {
		st, ok := states[id]
		if !ok || st.Status != quota.StatusUsing || time.Since(st.StartTime) < s.cfg.OrphanGrace {
			continue
		}
		if err := quota.GuardErr(s.cfg.Breakers.BalancesFor(resource), func() error { return s.store.Cancel(ctx, resource, id) }); err != nil {
			s.fail("release orphan", resource, err)
			return
		}
		s.orphans.WithLabelValues(resource).Inc()
		s.log.Info("reservation without a ledger row given back", zap.String("resource", resource),
			zap.String("session_id", id), zap.Int64("granted", st.Granted))
	}
}

// fail counts and logs a failed step. A give-back refused because it
// would leave a balance below zero (quota.ErrNegativeBalance: the balance
// already disagrees with its sessions, issue 22 §1) is logged as an error
// and counted apart: it repeats until reconciliation corrects the balance.
func (s *Sweeper) fail(op, resource string, err error) {
	s.errors.Inc()
	if errors.Is(err, quota.ErrNegativeBalance) {
		s.negative.Inc()
		s.log.Error("sweep refused: a give-back would leave the balance below zero", zap.String("op", op),
			zap.String("resource", resource), zap.Error(err))
		return
	}
	s.log.Warn("sweep step failed", zap.String("op", op), zap.String("resource", resource), zap.Error(err))
}

// ForgetResource deletes resource's per-resource series (leaks, orphans
// released): quota-center serve calls it once the resource is idle (issue
// 23 §1, per-resource series only for active resources); a sweep of it
// makes them again.
func (s *Sweeper) ForgetResource(resource string) {
	s.leaked.DeleteLabelValues(resource)
	s.orphans.DeleteLabelValues(resource)
}
