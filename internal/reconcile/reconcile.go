package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Store is what reconciliation uses of the balance store (Redis).
type Store interface {
	quota.Locker
	quota.BalanceReader
	quota.LimitSetter
	// Cancel gives back a reservation (an orphan: no ledger row).
	Cancel(ctx context.Context, resource, sessionID string) error
	// RestoreSessions brings back open sessions the store lost, with a
	// fresh lease, leaving the balance as it is.
	RestoreSessions(ctx context.Context, resource string, open []quota.UsageRecord, lease time.Duration) error
	// OpenSessionIDs lists the USING sessions of a resource whose lease ends
	// before leaseBefore (the lease index).
	OpenSessionIDs(ctx context.Context, resource string, leaseBefore time.Time) ([]string, error)
	// Sessions reads sessions by id; ids the store does not hold are absent
	// from the map.
	Sessions(ctx context.Context, resource string, ids []string) (map[string]quota.SessionState, error)
	// FailOpenSessions lists the sessions flagged by MarkFailOpen and not
	// yet acknowledged.
	FailOpenSessions(ctx context.Context, resource string) ([]string, error)
	// AckFailOpen forgets flagged sessions whose ledger rows are written.
	AckFailOpen(ctx context.Context, resource string, ids []string) error
	// ScopeFailOpen moves client's flagged session stored under id to the
	// scoped id (its lease and flag with it) and reports whether it did:
	// false, nothing changed, when that session is gone, or a live session
	// holds scoped already.
	ScopeFailOpen(ctx context.Context, resource, id, scoped, client string) (bool, error)
	// Adjust adds a's deltas to a period's balance if it exists, only
	// while the lock f holds f.Token, the balance is still a.Seen and no
	// session of a.Unrecorded holds a reservation a decrease of reserved
	// would take (all checked in the same atomic step); it reports what it
	// did (quota.Adjustment). Errors: quota.ErrLockLost and
	// quota.ErrNegativeBalance (nothing written).
	Adjust(ctx context.Context, resource string, period quota.Period, a quota.Adjustment, f quota.Fence) (quota.AdjustOutcome, error)
}

// Ledger is what reconciliation uses of the ledger (MySQL).
type Ledger interface {
	quota.SessionWriter
	quota.PeriodLedger
	// MarkLeaked moves USING rows to LEAKED; other rows are left as they are.
	MarkLeaked(ctx context.Context, leaks []quota.LeakedSession) error
	// SessionsByID reads rows by session id; ids without a row are absent.
	SessionsByID(ctx context.Context, ids []string) (map[string]quota.UsageRecord, error)
}

// Policies is what reconciliation reads of the policy store.
type Policies interface {
	// GetPolicy errors: quota.ErrResourceNotFound.
	GetPolicy(ctx context.Context, resource string) (quota.Policy, error)
	ListPolicies(ctx context.Context) ([]quota.Policy, error)
}

// Config tunes a Reconciler.
type Config struct {
	Interval time.Duration // between periodic passes; 0 = only on demand
	Grace    time.Duration // a Redis reservation younger than this may still be writing its ledger row
	Settle   time.Duration // time between the two drift reads
	// FullEvery: every FullEvery-th periodic pass checks sessions one by one
	// (steps 1–3); the passes between only measure the balance drift and
	// check sessions when it is not zero, so a quiet pass costs two reads
	// per resource whatever the number of live sessions (default 10).
	// On-demand reconciliation is always full.
	FullEvery int
	// Breakers guard the calls to the stores (nil ones let every call through).
	Breakers quota.Breakers
	// Visits, when set, makes the periodic passes (Run) skip the resources
	// nothing changed since their last clean reconciliation (activity.Visits;
	// issue 23 §1: a used resource that is quiet costs no Redis command per
	// pass). A pass is clean when it failed nowhere, was not skipped for
	// another instance's lock, and measured no drift and refused nothing;
	// any other outcome leaves the resource due at the next pass. The bound
	// on a change the log missed is Visits' own full-visit interval
	// (quota-center serve: FullEvery × Interval, the bound the
	// session-by-session passes had). On-demand reconciliation (All,
	// Resource) visits every resource it is asked about.
	Visits Visits
	// GlobalSessionIDs: no scoped session ids (quota.Options.GlobalSessionIDs,
	// QC_GLOBAL_SESSION_IDS): a fail-open session whose id's ledger row is
	// another session's is then not moved to its scoped id, and stays
	// unrecorded (logged at each pass).
	GlobalSessionIDs bool
}

// Visits is what reconciliation needs of activity.Visits.
type Visits interface {
	// Due returns the resources of names to reconcile now and the start to
	// pass to Done.
	Due(ctx context.Context, names []string) ([]string, time.Time)
	// Done records a clean visit that started at start; next < 0: no time
	// of its own.
	Done(resource string, start time.Time, next time.Duration)
}

// DefaultFullEvery is Config.FullEvery when unset: every 10th periodic
// pass checks sessions one by one.
const DefaultFullEvery = 10

// Reconciler repairs Redis from the ledger.
type Reconciler struct {
	cfg      Config
	store    Store
	ledger   Ledger
	policies Policies
	sched    quota.Scheduler
	log      *zap.Logger
	now      func() time.Time

	drift   map[string]*prometheus.GaugeVec // unit → {resource, field}
	repairs *prometheus.CounterVec
	runs    *prometheus.CounterVec
	refused *prometheus.CounterVec // {reason}
}

// Report is what one reconciliation of one resource found and did. Amounts
// are in the resource's unit; drift is Redis minus ledger.
type Report struct {
	Resource          string    `json:"resource"`
	PeriodStart       time.Time `json:"periodStart"`
	RedisCharged      int64     `json:"redisCharged"`
	RedisReserved     int64     `json:"redisReserved"`
	LedgerCharged     int64     `json:"ledgerCharged"`
	LedgerReserved    int64     `json:"ledgerReserved"`
	DriftCharged      int64     `json:"driftCharged"`
	DriftReserved     int64     `json:"driftReserved"`
	OrphansReleased   int       `json:"orphansReleased"`
	LedgerRowsSettled int       `json:"ledgerRowsSettled"`
	SessionsRestored  int       `json:"sessionsRestored"`
	BalanceAdjusted   bool      `json:"balanceAdjusted"`
	// EarlierPeriodAdjusted: the previous period's balance (still in Redis)
	// had a stable drift and was corrected (gap G5).
	EarlierPeriodAdjusted bool `json:"earlierPeriodAdjusted,omitempty"`
	// AdjustRefused says why a stable drift was not corrected (issue 22
	// §1): "held", the drift was only what live sessions without a USING
	// ledger row (younger than Grace, say) hold, which their own give-backs
	// return (or they were too many to name: a later pass); "moved", the
	// balance or the ledger changed after it was measured (a later pass).
	AdjustRefused    string `json:"adjustRefused,omitempty"`
	LimitSynced      bool   `json:"limitSynced"`       // Redis' limit differed from the policy's and was set to it
	FailOpenRecorded int    `json:"failOpenRecorded"`  // ledger rows written for fail-open grants counted only in Redis
	Skipped          string `json:"skipped,omitempty"` // why nothing was done (e.g. another instance holds the lock)
}

// MarshalJSON writes periodStart like every timestamp of the API
// (quota.TimeFormat: UTC, milliseconds), or null when the pass did not get
// as far as the balance (a skipped pass, say).
func (r Report) MarshalJSON() ([]byte, error) {
	type fields Report // without this method
	var start *string
	if !r.PeriodStart.IsZero() {
		s := r.PeriodStart.UTC().Format(quota.TimeFormat)
		start = &s
	}
	return json.Marshal(struct {
		fields
		PeriodStart *string `json:"periodStart"`
	}{fields(r), start})
}

// New builds a Reconciler and registers its metrics on reg:
// quota_reconcile_drift_<unit>{resource,field} (gauge, Redis minus ledger,
// field charged|reserved), quota_reconcile_repairs_total{resource,kind} and
// quota_reconcile_runs_total{result}.
func New(cfg Config, store Store, ledger Ledger, policies Policies, sched quota.Scheduler, log *zap.Logger, reg prometheus.Registerer) *Reconciler {
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * time.Second
	}
	if cfg.FullEvery <= 0 {
		cfg.FullEvery = DefaultFullEvery
	}
	f := promauto.With(reg)
	r := &Reconciler{
		cfg: cfg, store: store, ledger: ledger, policies: policies, sched: sched, log: log, now: time.Now,
		drift: map[string]*prometheus.GaugeVec{},
		repairs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_reconcile_repairs_total",
			Help: "Repairs made by reconciliation: orphan_released, ledger_settled, session_restored, balance_adjusted, limit_synced, fail_open_recorded, fail_open_scoped (a fail-open session moved to its scoped id, its bare id's ledger row being another session's).",
		}, []string{"resource", "kind"}),
		runs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_reconcile_runs_total", Help: "Reconciliations of one resource by result (ok, error, skipped).",
		}, []string{"result"}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_reconcile_adjust_refused_total",
			Help: "Drift corrections not written, by reason: held (the drift was what live sessions without a USING ledger row hold), moved (the balance or the ledger changed after it was measured), negative (charged or reserved would go below zero).",
		}, []string{"reason"}),
	}
	// Every series exists at 0 before its first count, so that increase()
	// sees that count (a series born at 1 hides it).
	for _, res := range []string{"ok", "error", "skipped"} {
		r.runs.WithLabelValues(res)
	}
	for _, reason := range []string{"held", "moved", "negative"} {
		r.refused.WithLabelValues(reason)
	}
	for _, u := range quota.Units() {
		r.drift[u] = f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_reconcile_drift_" + u,
			Help: "Redis minus ledger for the current period at the last reconciliation, in " + u + " (field charged or reserved).",
		}, []string{"resource", "field"})
	}
	return r
}

// Run reconciles every resource each Interval until ctx is done.
func (r *Reconciler) Run(ctx context.Context) error {
	if r.cfg.Interval <= 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for pass := 1; ; pass++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, _ = r.all(ctx, pass%r.cfg.FullEvery == 0, r.cfg.Visits)
		}
	}
}

// Periodic runs the periodic pass number pass (1, 2, …) once, as Run does
// each Interval: full when pass is a multiple of FullEvery, over the
// resources Config.Visits says are due (every one without Visits).
func (r *Reconciler) Periodic(ctx context.Context, pass int) ([]Report, error) {
	return r.all(ctx, pass%r.cfg.FullEvery == 0, r.cfg.Visits)
}

// All fully reconciles every resource with a policy and returns the reports.
func (r *Reconciler) All(ctx context.Context) ([]Report, error) { return r.all(ctx, true, nil) }

// all reconciles the listed resources (those v says are due when v is
// set, recording the clean passes in v).
func (r *Reconciler) all(ctx context.Context, full bool, v Visits) ([]Report, error) {
	pols, err := quota.Guard(r.cfg.Breakers.Ledger, func() ([]quota.Policy, error) { return r.policies.ListPolicies(ctx) })
	if err != nil {
		r.runs.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	var errs []error
	out := make([]Report, 0, len(pols))
	for _, p := range pols {
		for _, kind := range repairKinds {
			r.repairs.WithLabelValues(p.ResourceName, kind)
		}
	}
	var start time.Time
	if v != nil {
		names := make([]string, len(pols))
		for i, p := range pols {
			names[i] = p.ResourceName
		}
		due, st := v.Due(ctx, names)
		start = st
		keep := make(map[string]bool, len(due))
		for _, n := range due {
			keep[n] = true
		}
		pols = slices.DeleteFunc(pols, func(p quota.Policy) bool { return !keep[p.ResourceName] })
	}
	for _, p := range pols {
		rep, err := r.pass(ctx, p.ResourceName, full)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v != nil && rep.clean() && ctx.Err() == nil {
			v.Done(p.ResourceName, start, -1)
		}
		out = append(out, rep)
	}
	return out, errors.Join(errs...)
}

// clean reports a pass after which the resource may be skipped until it
// changes (Config.Visits): not skipped for another instance's lock, no
// drift measured, nothing refused. A repair is not clean either: it
// changed the balance (the change log has it anyway).
func (r Report) clean() bool {
	return r.Skipped == "" && r.DriftCharged == 0 && r.DriftReserved == 0 && r.AdjustRefused == "" && !r.repaired()
}

// repairKinds are the kind label values of quota_reconcile_repairs_total.
var repairKinds = []string{"orphan_released", "ledger_settled", "session_restored", "balance_adjusted", "earlier_period_adjusted", "limit_synced", "fail_open_recorded", "fail_open_scoped"}

// lockTTL is the TTL of a resource's reconcile lock. The pass renews it every
// third of it while it works (quota.KeepLock), so a pass of any length keeps
// it and an instance killed mid-pass blocks the others for at most lockTTL
// (issue 11 §3.4: it was a minute).
const lockTTL = 10 * time.Second

// Resource fully reconciles one resource. Errors: quota.ErrResourceNotFound,
// quota.ErrLockLost (another instance took the resource's reconcile lock
// while this pass worked: it stopped), and backend errors (the pass is
// retried at the next interval).
func (r *Reconciler) Resource(ctx context.Context, resource string) (Report, error) {
	return r.pass(ctx, resource, true)
}

func (r *Reconciler) pass(ctx context.Context, resource string, full bool) (Report, error) {
	rep, err := r.resource(ctx, resource, full)
	switch {
	case errors.Is(err, quota.ErrNegativeBalance):
		r.runs.WithLabelValues("error").Inc()
		r.refused.WithLabelValues("negative").Inc()
		r.log.Error("reconcile refused: a correction would leave the balance below zero", zap.String("resource", resource), zap.Error(err))
		return rep, fmt.Errorf("reconcile %s: %w", resource, err)
	case err != nil:
		r.runs.WithLabelValues("error").Inc()
		r.log.Warn("reconcile failed", zap.String("resource", resource), zap.Error(err))
		return rep, fmt.Errorf("reconcile %s: %w", resource, err)
	case rep.Skipped != "":
		r.runs.WithLabelValues("skipped").Inc()
	default:
		r.runs.WithLabelValues("ok").Inc()
	}
	return rep, nil
}

func (r *Reconciler) resource(ctx context.Context, resource string, full bool) (rep Report, err error) {
	rep = Report{Resource: resource}
	pol, err := r.policy(ctx, resource)
	if err != nil {
		return rep, err
	}
	token, err := quota.Guard(r.cfg.Breakers.BalancesFor(resource), func() (string, error) {
		return r.store.TryLock(ctx, resource, "reconcile", lockTTL)
	})
	if err != nil {
		return rep, err
	}
	if token == "" {
		rep.Skipped = "another instance is reconciling this resource"
		return rep, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		// Not through the breaker: releasing a lock is cleanup.
		_ = r.store.Unlock(uctx, resource, "reconcile", token)
	}()
	ctx, stop := quota.KeepLock(ctx, r.store, r.cfg.Breakers.Balances, resource, "reconcile", token, lockTTL)
	defer stop()
	// A step cut short because the lock was lost meanwhile (a ledger read
	// answering context.Canceled) ends the pass with quota.ErrLockLost, as
	// a refused correction does: not an internal error.
	defer func() { err = quota.LockLost(ctx, err) }()
	if err := r.recordFailOpen(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if err := r.syncLimit(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if !full {
		// Check sessions one by one only when the drift is real: the same
		// on two reads Settle apart (in-flight noise rarely repeats).
		first, second, err := r.readTwice(ctx, pol)
		if err != nil {
			return rep, err
		}
		if second == nil || second.drift() != first.drift() {
			return r.quiet(pol, rep, first.drift()), nil
		}
	}
	if err := r.releaseOrphans(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if err := r.settleLedger(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if err := r.balance(ctx, pol, &rep, quota.Fence{Name: "reconcile", Token: token}); err != nil {
		return rep, err
	}
	switch {
	case rep.repaired():
		r.log.Warn("reconcile repaired drift", zap.String("resource", resource), zap.Any("report", rep))
	case rep.DriftCharged != 0 || rep.DriftReserved != 0:
		// Measured, but the stores moved between the two reads: requests
		// in flight, not a repair. A real drift is repaired by a later pass.
		r.log.Info("reconcile saw drift while the stores were moving; nothing repaired",
			zap.String("resource", resource), zap.Any("report", rep))
	}
	return rep, nil
}

// repaired reports whether the pass changed anything: the balance, a
// session, a ledger row or the limit.
func (r Report) repaired() bool {
	return r.BalanceAdjusted || r.EarlierPeriodAdjusted || r.LimitSynced ||
		r.OrphansReleased+r.LedgerRowsSettled+r.SessionsRestored+r.FailOpenRecorded > 0
}

// redis makes one call to the balance store about resource through its
// breaker (on a Redis Cluster, that of the master serving resource).
func (r *Reconciler) redis(resource string, fn func() error) error {
	return quota.GuardErr(r.cfg.Breakers.BalancesFor(resource), fn)
}

// mysql makes one call to the ledger or policy store through its breaker.
func (r *Reconciler) mysql(fn func() error) error { return quota.GuardErr(r.cfg.Breakers.Ledger, fn) }

// policy reads a policy, through the ledger's breaker.
func (r *Reconciler) policy(ctx context.Context, resource string) (quota.Policy, error) {
	return quota.Guard(r.cfg.Breakers.Ledger, func() (quota.Policy, error) { return r.policies.GetPolicy(ctx, resource) })
}

// ForgetResource deletes resource's per-resource series (repairs, drift):
// quota-center serve calls it once the resource is idle (issue 23 §1,
// per-resource series only for active resources); a pass over it makes
// them again.
func (r *Reconciler) ForgetResource(resource string) {
	l := prometheus.Labels{"resource": resource}
	r.repairs.DeletePartialMatch(l)
	for _, g := range r.drift {
		g.DeletePartialMatch(l)
	}
}
