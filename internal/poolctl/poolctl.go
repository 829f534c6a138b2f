package poolctl

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Policies lists the resources and their pool configuration.
type Policies interface {
	ListPolicies(ctx context.Context) ([]quota.Policy, error)
	Lines(ctx context.Context, resource string) ([]pools.LineSpec, error)
	PoolSettings(ctx context.Context, resource string) (pools.Settings, bool, error)
}

// Store is the part of the balance store (Redis) the controller uses.
type Store interface {
	TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error)
	Unlock(ctx context.Context, resource, name, token string) error
	PoolModel(ctx context.Context, resource string, per quota.Period, lay pools.Layout) (*pools.Model, error)
	MovePools(ctx context.Context, resource string, per quota.Period, m pools.Move) (moved, free int64, err error)
}

// Journal keeps the controller's decisions and reclaims (the policy store).
type Journal interface {
	RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error
	Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error)
	VoidGrant(ctx context.Context, resource, id string, at int64) error
	Reclaims(ctx context.Context, resource string, limit int) ([]pools.Reclaim, error)
	PutReclaim(ctx context.Context, resource string, r pools.Reclaim) error
}

// Scheduler gives a policy's period at a time.
type Scheduler interface {
	PeriodAt(p quota.Policy, t time.Time) (quota.Period, error)
}

// LockName is the per-resource lock the controller holds while it decides.
const LockName = "poolctl"

// Runner runs the controller of every resource with lines.
type Runner struct {
	pol   Policies
	store Store
	jour  Journal
	sched Scheduler
	log   *zap.Logger
	now   func() time.Time
	every time.Duration
	ctls  map[string]*pools.Controller

	events *prometheus.CounterVec
	errs   prometheus.Counter
}

// New returns a runner ticking every `every` (pools.TickMs when 0) on the
// clock now (time.Now when nil).
func New(p Policies, s Store, j Journal, sched Scheduler, log *zap.Logger, reg prometheus.Registerer, every time.Duration, now func() time.Time) *Runner {
	if every <= 0 {
		every = time.Duration(pools.TickMs) * time.Millisecond
	}
	if now == nil {
		now = time.Now
	}
	f := promauto.With(reg)
	return &Runner{pol: p, store: s, jour: j, sched: sched, log: log.Named("poolctl"), now: now, every: every,
		ctls: map[string]*pools.Controller{},
		events: f.NewCounterVec(prometheus.CounterOpts{Name: "quota_pool_decisions_total",
			Help: "Pool controller decisions, by kind (LEND_PREDICTIVE, LEND_REACTIVE, RETURN, WATERMARK_*, RECLAIM_*, GIVE_BACK, MODE)."},
			[]string{"kind"}),
		errs: f.NewCounter(prometheus.CounterOpts{Name: "quota_pool_controller_errors_total",
			Help: "Pool controller passes that failed on a backend."}),
	}
}

// Run ticks until ctx ends; it returns nil then.
func (r *Runner) Run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		r.TickAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// TickAll runs one pass over every resource with lines.
func (r *Runner) TickAll(ctx context.Context) {
	ps, err := r.pol.ListPolicies(ctx)
	if err != nil {
		r.fail("list policies", "", err)
		return
	}
	for _, p := range ps {
		if ctx.Err() != nil {
			return
		}
		if _, err := r.Tick(ctx, p); err != nil {
			r.fail("tick", p.ResourceName, err)
		}
	}
}

func (r *Runner) fail(op, resource string, err error) {
	r.errs.Inc()
	r.log.Warn("pool controller failed", zap.String("op", op), zap.String("resource", resource), zap.Error(err))
}

// errLocked: another instance holds the resource's controller lock.
var errLocked = errors.New("another instance runs this resource's controller")

// Tick runs the controller of one resource once, if it has lines and this
// instance gets the lock, and returns the decisions it applied.
func (r *Runner) Tick(ctx context.Context, p quota.Policy) ([]pools.Event, error) {
	res := p.ResourceName
	lines, err := r.pol.Lines(ctx, res)
	if err != nil || len(lines) == 0 {
		delete(r.ctls, res)
		return nil, err
	}
	set, _, err := r.pol.PoolSettings(ctx, res)
	if err != nil {
		return nil, err
	}
	tok, err := r.store.TryLock(ctx, res, LockName, 3*r.every)
	if err != nil {
		return nil, err
	}
	if tok == "" {
		delete(r.ctls, res) // the holder has the memory now
		return nil, nil
	}
	defer func() { _ = r.store.Unlock(context.WithoutCancel(ctx), res, LockName, tok) }()
	now := r.now()
	per, err := r.sched.PeriodAt(p, now)
	if err != nil {
		return nil, err
	}
	lay, err := pools.Plan(p.TotalLimit, set, lines)
	if err != nil {
		return nil, err
	}
	m, err := r.store.PoolModel(ctx, res, per, lay)
	if err != nil {
		return nil, err
	}
	var periodMs int64
	if !per.End.IsZero() {
		periodMs = per.End.Sub(per.Start).Milliseconds()
	}
	ctl := r.ctls[res]
	if ctl == nil {
		ctl = pools.NewController(set, periodMs)
		r.ctls[res] = ctl
	}
	ctl.Settings, ctl.PeriodMs = set, periodMs
	open, err := r.jour.Reclaims(ctx, res, 100)
	if err != nil {
		return nil, err
	}
	ctl.SyncReclaims(open)
	evs, err := r.expireReleases(ctx, res, now.UnixMilli())
	if err != nil {
		return nil, err
	}
	evs = append(evs, ctl.Tick(m, now.UnixMilli())...)
	applied := make([]pools.Event, 0, len(evs))
	for _, e := range evs {
		if mv, ok := pools.MoveOf(e); ok {
			moved, _, err := r.store.MovePools(ctx, res, per, mv)
			if err != nil {
				return applied, err
			}
			if mv.Op != "watermark" {
				e.Amount = moved
			}
		}
		applied = append(applied, e)
		r.events.WithLabelValues(e.Kind).Inc()
		r.log.Info("pool decision", zap.String("resource", res), zap.String("kind", e.Kind),
			zap.String("line", e.Line), zap.Int64("amount", e.Amount), zap.String("reason", e.Reason))
	}
	if err := r.jour.RecordPoolEvents(ctx, res, applied); err != nil {
		return applied, err
	}
	for _, rc := range ctl.Reclaims {
		if rc.UpdateMs == now.UnixMilli() {
			if err := r.jour.PutReclaim(ctx, res, *rc); err != nil {
				return applied, err
			}
		}
	}
	return applied, nil
}

// expireReleases returns, as RETURN events, the buffer releases whose
// expiry passed (as far as they are not held now: pool_move.lua bounds
// it), and marks them done (voided) in the journal.
func (r *Runner) expireReleases(ctx context.Context, res string, now int64) ([]pools.Event, error) {
	gs, err := r.jour.Grants(ctx, res, 0)
	if err != nil {
		return nil, err
	}
	var evs []pools.Event
	for _, g := range gs {
		if g.Kind != pools.KindRelease || g.Voided || g.ExpiresMs > now {
			continue
		}
		if err := r.jour.VoidGrant(ctx, res, g.ID, now); err != nil {
			return evs, err
		}
		evs = append(evs, pools.Event{AtMs: now, Kind: "RETURN", Line: g.Line, Amount: g.Amount,
			Reason: "buffer release " + g.ID + " expired"})
	}
	return evs, nil
}
