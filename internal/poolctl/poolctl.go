package poolctl

import (
	"context"
	"slices"
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
	RenewLock(ctx context.Context, resource, name, token string, ttl time.Duration) (bool, error)
	Unlock(ctx context.Context, resource, name, token string) error
	PoolModel(ctx context.Context, resource string, per quota.Period, lay pools.Layout) (*pools.Model, error)
	MovePools(ctx context.Context, resource string, per quota.Period, m pools.Move) (moved, free int64, err error)
	// SpareNotes: the spare buffer's moves apply.lua noted and no apply
	// journalled (its process died, its reply was lost): each tick
	// journals them first (quota.DrainSpareMoves).
	quota.SpareNotes
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
	locks map[string]string // resource → the token of the lock this instance holds

	events *prometheus.CounterVec
	errs   prometheus.Counter

	// Visits, when set before Run, makes TickAll skip the resources whose
	// controller is at rest (pools.Controller.AtRest after a tick that
	// decided nothing, or no lines) and that nothing changed since
	// (activity.Visits; issue 23 §1: a quiet used resource costs no Redis
	// command per tick, not even the lock's renewal: the lock lapses and
	// the next tick after a change takes it again). Each is ticked again
	// on a change to its pools or balance in Redis (a use, a layout, a
	// move), when an operator's buffer release expires, and at least once
	// per Visits' full-visit interval (the bound on a change the log
	// missed, or on a pool settings change, which only MySQL holds). A tick
	// that failed, decided something, or found the lock held elsewhere
	// leaves the resource due at the next tick.
	Visits Visits
}

// Visits is what the controller needs of activity.Visits.
type Visits interface {
	// Due returns the resources of names to tick now and the start to pass
	// to Done.
	Due(ctx context.Context, names []string) ([]string, time.Time)
	// Done records a tick after which the resource is at rest; next ≥ 0:
	// due again at start+next.
	Done(resource string, start time.Time, next time.Duration)
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
		ctls: map[string]*pools.Controller{}, locks: map[string]string{},
		events: f.NewCounterVec(prometheus.CounterOpts{Name: "quota_pool_decisions_total",
			Help: "Pool controller decisions, by kind (LEND_PREDICTIVE, LEND_REACTIVE, RETURN, WATERMARK_*, RECLAIM_*, GIVE_BACK, MODE)."},
			[]string{"kind"}),
		errs: f.NewCounter(prometheus.CounterOpts{Name: "quota_pool_controller_errors_total",
			Help: "Pool controller passes that failed on a backend."}),
	}
}

// Run ticks until ctx ends; it returns nil then, after releasing the
// locks it holds.
func (r *Runner) Run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	defer r.Release(context.WithoutCancel(ctx))
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
	var start time.Time
	if r.Visits != nil {
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.ResourceName
		}
		due, st := r.Visits.Due(ctx, names)
		start = st
		keep := make(map[string]bool, len(due))
		for _, n := range due {
			keep[n] = true
		}
		ps = slices.DeleteFunc(ps, func(p quota.Policy) bool { return !keep[p.ResourceName] })
	}
	for _, p := range ps {
		if ctx.Err() != nil {
			return
		}
		_, rest, next, err := r.tick(ctx, p)
		if err != nil {
			r.fail("tick", p.ResourceName, err)
			continue
		}
		if rest && r.Visits != nil {
			r.Visits.Done(p.ResourceName, start, next)
		}
	}
}

func (r *Runner) fail(op, resource string, err error) {
	r.errs.Inc()
	r.log.Warn("pool controller failed", zap.String("op", op), zap.String("resource", resource), zap.Error(err))
}

// Tick runs the controller of one resource once, if it has lines and this
// instance gets the lock, and returns the decisions it applied.
func (r *Runner) Tick(ctx context.Context, p quota.Policy) ([]pools.Event, error) {
	evs, _, _, err := r.tick(ctx, p)
	return evs, err
}

// tick is Tick; rest reports that the resource may be skipped until it
// changes or next passes (see Runner.Visits; next < 0: no time of its
// own).
func (r *Runner) tick(ctx context.Context, p quota.Policy) (_ []pools.Event, rest bool, next time.Duration, err error) {
	res := p.ResourceName
	lines, err := r.pol.Lines(ctx, res)
	if err != nil || len(lines) == 0 {
		delete(r.ctls, res)
		if tok := r.locks[res]; tok != "" && err == nil { // no lines left: nothing to decide
			_ = r.store.Unlock(ctx, res, LockName, tok)
			delete(r.locks, res)
		}
		return nil, err == nil, -1, err
	}
	set, _, err := r.pol.PoolSettings(ctx, res)
	if err != nil {
		return nil, false, -1, err
	}
	if held, err := r.hold(ctx, res); err != nil || !held {
		return nil, false, -1, err
	}
	now := r.now()
	if err := quota.DrainSpareMoves(ctx, r.store, r.jour, res, now.UnixMilli()); err != nil {
		return nil, false, -1, err
	}
	per, err := r.sched.PeriodAt(p, now)
	if err != nil {
		return nil, false, -1, err
	}
	lay, err := pools.Plan(p.TotalLimit, set, lines)
	if err != nil {
		return nil, false, -1, err
	}
	m, err := r.store.PoolModel(ctx, res, per, lay)
	if err != nil {
		return nil, false, -1, err
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
		return nil, false, -1, err
	}
	ctl.SyncReclaims(open)
	evs, released, expires, err := r.expireReleases(ctx, res, now.UnixMilli())
	if err != nil {
		return nil, false, -1, err
	}
	for _, e := range evs {
		m.Return(e.Line, e.Amount) // as pool_move.lua will: the controller decides on what is left
	}
	ctl.Released = released
	evs = append(evs, ctl.Tick(m, now.UnixMilli())...)
	applied := make([]pools.Event, 0, len(evs))
	for _, e := range evs {
		if mv, ok := pools.MoveOf(e); ok {
			moved, _, err := r.store.MovePools(ctx, res, per, mv)
			if err != nil {
				return applied, false, -1, err
			}
			if mv.Op != "watermark" && mv.Op != "mode" {
				e.Amount = moved
			}
		}
		applied = append(applied, e)
		r.events.WithLabelValues(e.Kind).Inc()
		r.log.Info("pool decision", zap.String("resource", res), zap.String("kind", e.Kind),
			zap.String("line", e.Line), zap.Int64("amount", e.Amount), zap.String("reason", e.Reason))
	}
	if err := r.jour.RecordPoolEvents(ctx, res, applied); err != nil {
		return applied, false, -1, err
	}
	for _, rc := range ctl.Reclaims {
		if rc.UpdateMs == now.UnixMilli() {
			if err := r.jour.PutReclaim(ctx, res, *rc); err != nil {
				return applied, false, -1, err
			}
		}
	}
	next = -1
	if expires > 0 {
		next = time.Duration(expires-now.UnixMilli()) * time.Millisecond
	}
	// The period's end changes the model (a new balance): due then.
	if !per.End.IsZero() {
		if d := per.End.Sub(now); next < 0 || d < next {
			next = d
		}
	}
	return applied, len(applied) == 0 && ctl.AtRest(m), next, nil
}

// hold takes or renews the resource's controller lock. The lock is kept
// from tick to tick (its TTL is three ticks), so one instance keeps the
// controller and its memory while it lives; another takes over within
// three ticks of its death.
func (r *Runner) hold(ctx context.Context, res string) (bool, error) {
	ttl := 3 * r.every
	if tok := r.locks[res]; tok != "" {
		held, err := r.store.RenewLock(ctx, res, LockName, tok, ttl)
		if err != nil || held {
			return held, err
		}
		delete(r.locks, res) // lost it (it expired and another took it)
	}
	tok, err := r.store.TryLock(ctx, res, LockName, ttl)
	if err != nil {
		return false, err
	}
	if tok == "" {
		delete(r.ctls, res) // the holder has the memory now
		return false, nil
	}
	r.locks[res] = tok
	return true, nil
}

// Release gives up the controller locks this runner holds (Run does it
// when it ends).
func (r *Runner) Release(ctx context.Context) {
	for res, tok := range r.locks {
		_ = r.store.Unlock(ctx, res, LockName, tok)
		delete(r.locks, res)
	}
}

// expireReleases returns, as RETURN events, the buffer releases whose
// expiry passed (as far as they are not held now: pool_move.lua bounds
// it; the controller returns the rest later), and marks them done (voided)
// in the journal. released is what the releases still active lend, by line;
// expires the earliest expiry of those (Unix ms, 0: none).
func (r *Runner) expireReleases(ctx context.Context, res string, now int64) (evs []pools.Event, released map[string]int64, expires int64, err error) {
	gs, err := r.jour.Grants(ctx, res, 0)
	if err != nil {
		return nil, nil, 0, err
	}
	released = map[string]int64{}
	for _, g := range gs {
		if g.Kind != pools.KindRelease || g.Voided {
			continue
		}
		if g.ExpiresMs > now {
			released[g.Line] += g.Amount
			if expires == 0 || g.ExpiresMs < expires {
				expires = g.ExpiresMs
			}
			continue
		}
		if err := r.jour.VoidGrant(ctx, res, g.ID, now); err != nil {
			return evs, nil, 0, err
		}
		evs = append(evs, pools.Event{AtMs: now, Kind: "RETURN", Line: g.Line, Amount: g.Amount,
			Reason: "buffer release " + g.ID + " expired"})
	}
	return evs, released, expires, nil
}
