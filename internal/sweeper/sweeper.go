// Package sweeper finds sessions whose caller died: USING sessions whose
// lease (leakThresholdSeconds since the last heartbeat, on Redis TIME)
// expired. It marks them LEAKED, keeping their whole grant charged, and
// records that in the ledger.
//
// Several instances may sweep at once: the sweep script is atomic and only
// returns the sessions it moved itself, so none is swept twice, and a
// session heartbeating on time is never swept. A ledger write that fails is
// retried on the next pass (the balance store keeps the swept ids until they
// are acknowledged). Its cost grows with the expired sessions only: it reads
// the lease index up to now, never every session.
//
// It imports quota (and zap, prometheus); never redisstore or mysqlstore.
package sweeper

import (
	"context"
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
	Sweep(ctx context.Context, resource string, max int, retention time.Duration) ([]quota.LeakedSession, error)
	AckLeaks(ctx context.Context, resource string, sessionIDs []string) error
}

// Ledger is the part of the ledger the sweeper uses.
type Ledger interface {
	MarkLeaked(ctx context.Context, leaks []quota.LeakedSession) error
}

// Config tunes a Sweeper.
type Config struct {
	Interval  time.Duration  // between passes
	Batch     int            // sessions per sweep call
	Retention time.Duration  // how long a LEAKED session stays in Redis for a late finish to true it up
	Breakers  quota.Breakers // guard the calls to the stores; nil ones let every call through
}

// Sweeper runs the leak sweep on an interval.
type Sweeper struct {
	cfg      Config
	policies Policies
	store    Store
	ledger   Ledger
	log      *zap.Logger
	leaked   *prometheus.CounterVec
	errors   prometheus.Counter
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
		errors: f.NewCounter(prometheus.CounterOpts{
			Name: "quota_sweep_errors_total", Help: "Sweep passes or steps that failed (retried on the next pass).",
		}),
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Name: "quota_sweep_duration_seconds", Help: "Duration of one sweep pass over all resources.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
}

// Run sweeps every Interval until ctx is done; it returns nil on a clean stop.
func (s *Sweeper) Run(ctx context.Context) error {
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
	for _, p := range pols {
		for ctx.Err() == nil {
			n, more := s.sweepResource(ctx, p.ResourceName)
			total += n
			if !more {
				break
			}
		}
	}
	return total
}

// sweepResource runs one sweep call; more reports a full batch of fresh
// leaks (there may be more expired sessions waiting).
func (s *Sweeper) sweepResource(ctx context.Context, resource string) (fresh int, more bool) {
	leaks, err := quota.Guard(s.cfg.Breakers.Balances, func() ([]quota.LeakedSession, error) {
		return s.store.Sweep(ctx, resource, s.cfg.Batch, s.cfg.Retention)
	})
	if err != nil {
		s.fail("sweep", resource, err)
		return 0, false
	}
	if len(leaks) == 0 {
		return 0, false
	}
	for _, l := range leaks {
		if l.Fresh {
			fresh++
			s.log.Info("session leaked", zap.String("resource", resource), zap.String("session_id", l.SessionID),
				zap.Int64("granted", l.Granted))
		}
	}
	s.leaked.WithLabelValues(resource).Add(float64(fresh))
	if err := quota.GuardErr(s.cfg.Breakers.Ledger, func() error { return s.ledger.MarkLeaked(ctx, leaks) }); err != nil {
		s.fail("mark leaked", resource, err)
		return fresh, false
	}
	ids := make([]string, len(leaks))
	for i, l := range leaks {
		ids[i] = l.SessionID
	}
	if err := quota.GuardErr(s.cfg.Breakers.Balances, func() error { return s.store.AckLeaks(ctx, resource, ids) }); err != nil {
		s.fail("ack leaks", resource, err)
		return fresh, false
	}
	return fresh, fresh >= s.cfg.Batch
}

func (s *Sweeper) fail(op, resource string, err error) {
	s.errors.Inc()
	s.log.Warn("sweep step failed", zap.String("op", op), zap.String("resource", resource), zap.Error(err))
}
