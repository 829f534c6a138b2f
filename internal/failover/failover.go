package failover

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Topology tells which master holds each resource's keys now (an identity
// that changes when the master is replaced or restarted); a resource whose
// master did not answer is absent. redisstore.Store implements it.
type Topology interface {
	Masters(ctx context.Context, resources []string) (map[string]string, error)
}

// Balances is what the rebuild needs of the balance store.
type Balances interface {
	TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error)
	Unlock(ctx context.Context, resource, name, token string) error
	// DropBalance deletes the period's balance only while the lock f
	// holds f.Token, checked in the same step (quota.ErrLockLost
	// otherwise: nothing dropped).
	DropBalance(ctx context.Context, resource string, period quota.Period, f quota.Fence) error
}

// Active lists the resources to watch: those active now (used or changed
// within a window, internal/activity). An idle resource is not watched and
// costs nothing per poll: the writes a failover can lose are the last
// ones, and a resource idle for a window had them replicated long ago.
type Active interface {
	Active(ctx context.Context) ([]string, error)
}

// Policies reads the policy of a resource to rebuild (its period).
// quota.ErrResourceNotFound: deleted, nothing to rebuild.
type Policies interface {
	Policy(ctx context.Context, resource string) (quota.Policy, error)
}

// Watcher polls the topology and repairs the resources whose master
// changed. The first poll only records what it sees. Each poll costs one
// read of the active set, the topology's commands (one INFO per master,
// and once per resource ever a CLUSTER KEYSLOT on a cluster) and a policy
// read per resource to rebuild: nothing per idle resource (issue 23 §1).
type Watcher struct {
	Interval  time.Duration // between polls (default 1s)
	Topology  Topology
	Balances  Balances
	Active    Active
	Policies  Policies
	Scheduler quota.Scheduler
	// Reconcile, when set, runs after a rebuild, ReconcileAfter later, for
	// what was in flight during it (docs/reliability.md, G7).
	Reconcile      func(ctx context.Context, resource string) error
	ReconcileAfter time.Duration
	Log            *zap.Logger
	Now            func() time.Time   // default time.Now
	Repairs        prometheus.Counter // nil: not counted; see NewMetrics
	Watched        prometheus.Gauge   // resources whose master is known; nil: not exported
	// OnMasterChange, when set, is called once per poll that found a
	// resource's master replaced or restarted, before the rebuilds:
	// quota-center serve passes activity.Tracker.Reset, since the changes
	// published on the lost master just before may be gone and the loops
	// that skip unchanged resources must visit every one again.
	OnMasterChange func()

	masters map[string]string   // resource → master identity, last seen
	pending map[string]bool     // master changed, rebuild not done yet
	seen    map[string]struct{} // the master identities of the last poll that saw any
}

// NewMetrics registers quota_redis_failover_repairs_total and
// quota_redis_failover_watched_resources on reg and returns them, for
// Watcher.Repairs and Watcher.Watched.
func NewMetrics(reg prometheus.Registerer) (prometheus.Counter, prometheus.Gauge) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quota_redis_failover_repairs_total",
		Help: "Resources rebuilt from the ledger because the Redis master holding them was replaced or restarted.",
	})
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quota_redis_failover_watched_resources",
		Help: "Active resources whose Redis master the failover watcher knows (a change of it is noticed from the next poll on); idle resources are not watched.",
	})
	reg.MustRegister(c, g)
	return c, g
}

// Run polls until ctx ends. It returns nil then.
func (w *Watcher) Run(ctx context.Context) error {
	if w.Interval <= 0 {
		w.Interval = time.Second
	}
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		w.Poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Poll looks at the topology once and rebuilds every active resource whose
// master changed since the last poll (and those whose rebuild failed
// before). A resource that became active since the last poll counts as
// changed when its master now is none the last poll saw (a promoted
// replica or a restarted server): its last writes may be the lost ones.
// Resources no longer active are forgotten. It returns the resources
// rebuilt.
func (w *Watcher) Poll(ctx context.Context) []string {
	if w.masters == nil {
		w.masters, w.pending = map[string]string{}, map[string]bool{}
	}
	names, err := w.Active.Active(ctx)
	if err != nil && len(names) == 0 {
		w.log().Warn("failover watch: active resources", zap.Error(err))
		return nil
	}
	now, err := w.Topology.Masters(ctx, names)
	if err != nil {
		w.log().Warn("failover watch: masters", zap.Error(err))
		return nil
	}
	active := make(map[string]bool, len(names))
	for _, r := range names {
		active[r] = true
	}
	for r := range w.masters {
		if !active[r] {
			delete(w.masters, r) // idle now: watched again once active
		}
	}
	seen := make(map[string]struct{}, 4)
	changed := false
	for r, m := range now {
		seen[m] = struct{}{}
		old, known := w.masters[r]
		_, wasSeen := w.seen[m]
		if known && old != m || !known && w.seen != nil && !wasSeen {
			w.log().Warn("redis master of a resource changed: rebuilding it from the ledger",
				zap.String("resource", r), zap.String("was", old), zap.String("now", m))
			w.pending[r] = true
			changed = true
		}
		w.masters[r] = m
	}
	if len(seen) > 0 {
		w.seen = seen
	}
	if changed && w.OnMasterChange != nil {
		w.OnMasterChange()
	}
	if w.Watched != nil {
		w.Watched.Set(float64(len(w.masters)))
	}
	var done []string
	for r := range w.pending {
		pol, err := w.Policies.Policy(ctx, r)
		if errors.Is(err, quota.ErrResourceNotFound) {
			delete(w.pending, r) // policy deleted
			continue
		}
		if err == nil {
			err = w.rebuild(ctx, pol)
		}
		if err != nil {
			w.log().Warn("failover rebuild (retried next poll)", zap.String("resource", r), zap.Error(err))
			continue
		}
		delete(w.pending, r)
		done = append(done, r)
		if w.Repairs != nil {
			w.Repairs.Inc()
		}
		if w.Reconcile != nil {
			go func() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(w.ReconcileAfter):
				}
				if err := w.Reconcile(ctx, r); err != nil {
					w.log().Warn("reconcile after a failover rebuild", zap.String("resource", r), zap.Error(err))
				}
			}()
		}
	}
	return done
}

// rebuild drops the resource's current period balance under its seed lock
// (the lock quota.Service takes to seed it), so that the next apply seeds it
// from the ledger.
func (w *Watcher) rebuild(ctx context.Context, pol quota.Policy) error {
	nowFn := w.Now
	if nowFn == nil {
		nowFn = time.Now
	}
	per, err := w.Scheduler.PeriodAt(pol, nowFn())
	if err != nil {
		return err
	}
	lock := "seed:" + strconv.FormatInt(per.ID(), 10)
	token, err := w.Balances.TryLock(ctx, pol.ResourceName, lock, lockTTL)
	if err != nil {
		return err
	}
	if token == "" {
		return errSeeding
	}
	defer func() { _ = w.Balances.Unlock(context.WithoutCancel(ctx), pol.ResourceName, lock, token) }()
	// Fenced (issue 11 §3.4): if this watcher was cut off past the lock's
	// TTL, another instance may have seeded a fresh balance under the lock
	// since; the drop is then refused (quota.ErrLockLost) and the resource
	// stays pending for the next poll.
	return w.Balances.DropBalance(ctx, pol.ResourceName, per, quota.Fence{Name: lock, Token: token})
}

// lockTTL is how long the watcher takes a period's seed lock for: the
// seeders' TTL (quota's seedLockTTL), so that a watcher that dies holding
// it blocks the resource's seeding no longer than a dead seeder would. The
// drop is one script call, far shorter.
const lockTTL = 3 * time.Second

// errSeeding: another instance holds the period's seed lock.
var errSeeding = errors.New("the period is being seeded by another holder of its lock")

func (w *Watcher) log() *zap.Logger {
	if w.Log == nil {
		return zap.NewNop()
	}
	return w.Log
}
