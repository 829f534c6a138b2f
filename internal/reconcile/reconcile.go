// Package reconcile compares the live balances in Redis with the MySQL
// ledger, the source of truth, and repairs Redis from it. It runs on an
// interval and on demand (POST /admin/reconcile); a per-resource lock in
// Redis makes one instance at a time reconcile a resource.
//
// Per resource it repairs, in order:
//  1. orphan reservations: USING sessions in Redis with no ledger row,
//     older than Grace (the process died between the Redis reservation and
//     the ledger write, or the write failed and the give-back too): given
//     back;
//  2. ledger rows left behind: USING rows whose Redis session is FINISHED or
//     LEAKED (the ledger write after the Redis step failed and was never
//     retried): settled from the Redis session; and USING rows whose Redis
//     session is a CANCELLED tombstone (the apply answered 503 after an
//     insert whose outcome was unknown, and the row landed): settled with
//     nothing charged;
//  3. lost sessions: USING rows whose Redis session is gone while the
//     balance stayed (eviction, partial loss): brought back with a fresh
//     lease, their reservation being in the balance already;
//  4. balance drift of the current period: Redis charged/reserved minus the
//     ledger's. In-flight requests make a momentary difference, so a drift
//     is corrected only when neither Redis nor the ledger changed at all
//     between two reads Settle apart (Settle must exceed the ledger's write
//     timeout: then nothing was in flight), and then by a delta (HINCRBY),
//     never by overwriting. Under steady traffic the drift is reported and
//     corrected at the next quiet moment.
//
// The drift found is exported per resource and logged.
//
// It imports quota, prometheus and zap; never the adapters.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

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
}

// Reconciler repairs Redis from the ledger.
type Reconciler struct {
	cfg      Config
	store    quota.BalanceStore
	ledger   quota.Ledger
	policies quota.PolicyStore
	sched    quota.Scheduler
	log      *zap.Logger
	now      func() time.Time

	drift   map[string]*prometheus.GaugeVec // unit → {resource, field}
	repairs *prometheus.CounterVec
	runs    *prometheus.CounterVec
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
	LimitSynced       bool      `json:"limitSynced"`       // Redis' limit differed from the policy's and was set to it
	FailOpenRecorded  int       `json:"failOpenRecorded"`  // ledger rows written for fail-open grants counted only in Redis
	Skipped           string    `json:"skipped,omitempty"` // why nothing was done (e.g. another instance holds the lock)
}

// MarshalJSON writes periodStart like every timestamp of the API
// (quota.TimeFormat: UTC, milliseconds).
func (r Report) MarshalJSON() ([]byte, error) {
	type fields Report // without this method
	return json.Marshal(struct {
		fields
		PeriodStart string `json:"periodStart"`
	}{fields(r), r.PeriodStart.UTC().Format(quota.TimeFormat)})
}

// New builds a Reconciler and registers its metrics on reg:
// quota_reconcile_drift_<unit>{resource,field} (gauge, Redis minus ledger,
// field charged|reserved), quota_reconcile_repairs_total{resource,kind} and
// quota_reconcile_runs_total{result}.
func New(cfg Config, store quota.BalanceStore, ledger quota.Ledger, policies quota.PolicyStore, sched quota.Scheduler, log *zap.Logger, reg prometheus.Registerer) *Reconciler {
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * time.Second
	}
	if cfg.FullEvery <= 0 {
		cfg.FullEvery = 10
	}
	f := promauto.With(reg)
	r := &Reconciler{
		cfg: cfg, store: store, ledger: ledger, policies: policies, sched: sched, log: log, now: time.Now,
		drift: map[string]*prometheus.GaugeVec{},
		repairs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_reconcile_repairs_total",
			Help: "Repairs made by reconciliation: orphan_released, ledger_settled, session_restored, balance_adjusted, limit_synced, fail_open_recorded.",
		}, []string{"resource", "kind"}),
		runs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_reconcile_runs_total", Help: "Reconciliations of one resource by result (ok, error, skipped).",
		}, []string{"result"}),
	}
	// Every series exists at 0 before its first count, so that increase()
	// sees that count (a series born at 1 hides it).
	for _, res := range []string{"ok", "error", "skipped"} {
		r.runs.WithLabelValues(res)
	}
	for _, u := range []string{"seconds", "calls", "tokens", "bytes"} {
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
			_, _ = r.all(ctx, pass%r.cfg.FullEvery == 0)
		}
	}
}

// All fully reconciles every resource with a policy and returns the reports.
func (r *Reconciler) All(ctx context.Context) ([]Report, error) { return r.all(ctx, true) }

func (r *Reconciler) all(ctx context.Context, full bool) ([]Report, error) {
	pols, err := r.policies.ListPolicies(ctx)
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
	for _, p := range pols {
		rep, err := r.pass(ctx, p.ResourceName, full)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, rep)
	}
	return out, errors.Join(errs...)
}

// repairKinds are the kind label values of quota_reconcile_repairs_total.
var repairKinds = []string{"orphan_released", "ledger_settled", "session_restored", "balance_adjusted", "limit_synced", "fail_open_recorded"}

// lockTTL bounds one reconciliation's hold on a resource.
const lockTTL = time.Minute

// Resource fully reconciles one resource. Errors: quota.ErrResourceNotFound,
// and backend errors (the pass is retried at the next interval).
func (r *Reconciler) Resource(ctx context.Context, resource string) (Report, error) {
	return r.pass(ctx, resource, true)
}

func (r *Reconciler) pass(ctx context.Context, resource string, full bool) (Report, error) {
	rep, err := r.resource(ctx, resource, full)
	switch {
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

func (r *Reconciler) resource(ctx context.Context, resource string, full bool) (Report, error) {
	rep := Report{Resource: resource}
	pol, err := r.policies.GetPolicy(ctx, resource)
	if err != nil {
		return rep, err
	}
	token, err := r.store.TryLock(ctx, resource, "reconcile", lockTTL)
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
		_ = r.store.Unlock(uctx, resource, "reconcile", token)
	}()
	if err := r.recordFailOpen(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if err := r.syncLimit(ctx, pol, &rep); err != nil {
		return rep, err
	}
	var dc, dr int64
	if !full {
		// Check sessions one by one only when the drift is real: the same
		// on two probes Settle apart (in-flight noise rarely repeats).
		dc, dr, err = r.probe(ctx, pol)
		if err != nil {
			return rep, err
		}
		if dc != 0 || dr != 0 {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(r.cfg.Settle):
			}
			dc2, dr2, err := r.probe(ctx, pol)
			if err != nil {
				return rep, err
			}
			full = dc2 == dc && dr2 == dr
		}
	}
	if !full {
		return r.quiet(pol, rep, dc, dr)
	}
	if err := r.releaseOrphans(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if err := r.settleLedger(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if err := r.balance(ctx, pol, &rep); err != nil {
		return rep, err
	}
	if rep.DriftCharged != 0 || rep.DriftReserved != 0 || rep.OrphansReleased+rep.LedgerRowsSettled+rep.SessionsRestored > 0 {
		r.log.Warn("reconcile repaired drift", zap.String("resource", resource), zap.Any("report", rep))
	}
	return rep, nil
}

// recordFailOpen writes the ledger rows of fail-open grants that Redis
// counted while MySQL was unreachable, settling them as Redis did since. It
// runs on every pass, before any drift is measured, so such a grant is never
// mistaken for drift.
func (r *Reconciler) recordFailOpen(ctx context.Context, pol quota.Policy, rep *Report) error {
	resource := pol.ResourceName
	ids, err := r.store.FailOpenSessions(ctx, resource)
	if err != nil || len(ids) == 0 {
		return err
	}
	rows, err := r.ledger.SessionsByID(ctx, ids)
	if err != nil {
		return err
	}
	states, err := r.store.Sessions(ctx, resource, ids)
	if err != nil {
		return err
	}
	var done []string
	for _, id := range ids {
		st, ok := states[id]
		if _, written := rows[id]; written || !ok {
			done = append(done, id) // landed after all, or expired from Redis
			continue
		}
		rec := quota.UsageRecord{
			ResourceName: resource, ClientID: st.ClientID, SessionID: id, PeriodStart: st.PeriodStart,
			ApplyAmount: st.ApplyAmount, MinAmount: st.MinAmount, GrantedAmount: st.Granted,
			ChargedAmount: st.Granted, StartTime: st.StartTime, Status: quota.StatusUsing,
		}
		if err := r.ledger.InsertSession(ctx, rec); err != nil && !errors.Is(err, quota.ErrDuplicateSession) {
			return err
		}
		switch st.Status {
		case quota.StatusFinished:
			rec.Status, rec.ChargedAmount, rec.RefundedAmount, rec.OverageAmount = quota.StatusFinished, st.Actual, st.Refunded, st.Overage
			rec.EndTime, rec.LeakRecovered = st.EndTime, st.WasLeaked
			err = r.ledger.FinishSession(ctx, rec)
		case quota.StatusLeaked:
			err = r.ledger.MarkLeaked(ctx, []quota.LeakedSession{{
				ResourceName: resource, SessionID: id, PeriodStart: st.PeriodStart, Granted: st.Granted, EndTime: st.EndTime,
			}})
		}
		if err != nil {
			return err
		}
		done = append(done, id)
		rep.FailOpenRecorded++
		r.repairs.WithLabelValues(resource, "fail_open_recorded").Inc()
	}
	return r.store.AckFailOpen(ctx, resource, done)
}

// syncLimit makes Redis' limit the policy's: concurrent PUTs of one policy
// can finish their MySQL and Redis writes in different orders.
func (r *Reconciler) syncLimit(ctx context.Context, pol quota.Policy, rep *Report) error {
	per, err := r.sched.PeriodAt(pol, r.now())
	if err != nil {
		return err
	}
	bal, err := r.store.Balance(ctx, pol.ResourceName, per)
	if err != nil || bal.Limit == pol.TotalLimit || (!bal.Exists && bal.Limit == 0) {
		return err
	}
	// Read the policy again right before writing: a PUT may have landed.
	cur, err := r.policies.GetPolicy(ctx, pol.ResourceName)
	if err != nil || cur.TotalLimit == bal.Limit {
		return err
	}
	if err := r.store.SetLimit(ctx, pol.ResourceName, cur.TotalLimit); err != nil {
		return err
	}
	rep.LimitSynced = true
	r.repairs.WithLabelValues(pol.ResourceName, "limit_synced").Inc()
	return nil
}

// probe reads the current period's drift once (Redis minus ledger).
func (r *Reconciler) probe(ctx context.Context, pol quota.Policy) (int64, int64, error) {
	per, err := r.sched.PeriodAt(pol, r.now())
	if err != nil {
		return 0, 0, err
	}
	bal, err := r.store.Balance(ctx, pol.ResourceName, per)
	if err != nil || !bal.Exists {
		return 0, 0, err
	}
	tot, err := r.ledger.PeriodTotals(ctx, pol.ResourceName, per.Start)
	if err != nil {
		return 0, 0, err
	}
	return bal.Charged - tot.Charged, bal.Reserved - tot.Reserved, nil
}

// quiet reports a pass whose drift was zero or not stable (in-flight noise)
// and so checked no session; dc and dr are the last probe's drift.
func (r *Reconciler) quiet(pol quota.Policy, rep Report, dc, dr int64) (Report, error) {
	rep.DriftCharged, rep.DriftReserved = dc, dr
	if g, ok := r.drift[pol.QuotaType.Unit()]; ok {
		g.WithLabelValues(pol.ResourceName, "charged").Set(float64(dc))
		g.WithLabelValues(pol.ResourceName, "reserved").Set(float64(dr))
	}
	return rep, nil
}

// checkChunk is how many sessions one reconciliation step looks up at once
// in Redis and in the ledger, so that its memory stays flat however many
// sessions are open (a full pass over 150,000 open sessions at once once
// took 390 MiB).
const checkChunk = 500

// inChunks calls fn with consecutive parts of items, at most n each.
func inChunks[T any](items []T, n int, fn func(part []T) error) error {
	for len(items) > 0 {
		k := min(n, len(items))
		if err := fn(items[:k]); err != nil {
			return err
		}
		items = items[k:]
	}
	return nil
}

// releaseOrphans gives back Redis reservations that have no ledger row.
func (r *Reconciler) releaseOrphans(ctx context.Context, pol quota.Policy, rep *Report) error {
	resource := pol.ResourceName
	// Only sessions untouched (no apply, no heartbeat) for Grace can be
	// orphans: their lease ends before now + lease − Grace.
	ids, err := r.store.OpenSessionIDs(ctx, resource, r.now().Add(pol.LeaseDuration()-r.cfg.Grace))
	if err != nil || len(ids) == 0 {
		return err
	}
	return inChunks(ids, checkChunk, func(ids []string) error {
		rows, err := r.ledger.SessionsByID(ctx, ids)
		if err != nil {
			return err
		}
		var missing []string
		for _, id := range ids {
			if _, ok := rows[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		states, err := r.store.Sessions(ctx, resource, missing)
		if err != nil {
			return err
		}
		cutoff := r.now().Add(-r.cfg.Grace)
		for _, id := range missing {
			st, ok := states[id]
			if !ok || st.Status != quota.StatusUsing || st.StartTime.After(cutoff) {
				continue
			}
			// Read the ledger once more right before: the row may have landed.
			if again, err := r.ledger.SessionsByID(ctx, []string{id}); err != nil || len(again) > 0 {
				continue
			}
			if err := r.store.Cancel(ctx, resource, id); err != nil {
				return err
			}
			rep.OrphansReleased++
			r.repairs.WithLabelValues(resource, "orphan_released").Inc()
		}
		return nil
	})
}

// settleLedger settles USING ledger rows from their Redis sessions, and
// brings back sessions Redis lost.
func (r *Reconciler) settleLedger(ctx context.Context, pol quota.Policy, rep *Report) error {
	var after int64
	for {
		open, next, err := r.ledger.OpenSessionsPage(ctx, pol.ResourceName, after, checkChunk)
		if err != nil || len(open) == 0 {
			return err
		}
		if err := r.settleChunk(ctx, pol, open, rep); err != nil {
			return err
		}
		if len(open) < checkChunk {
			return nil
		}
		after = next
	}
}

// settleChunk is settleLedger for some of the open ledger rows.
func (r *Reconciler) settleChunk(ctx context.Context, pol quota.Policy, open []quota.UsageRecord, rep *Report) error {
	resource := pol.ResourceName
	ids := make([]string, len(open))
	for i, row := range open {
		ids[i] = row.SessionID
	}
	states, err := r.store.Sessions(ctx, resource, ids)
	if err != nil {
		return err
	}
	var lost []quota.UsageRecord
	var leaked []quota.LeakedSession
	for _, row := range open {
		st, ok := states[row.SessionID]
		switch {
		case !ok:
			lost = append(lost, row)
		case st.Status == quota.StatusFinished:
			rec := row
			rec.Status, rec.ChargedAmount, rec.RefundedAmount, rec.OverageAmount = quota.StatusFinished, st.Actual, st.Refunded, st.Overage
			rec.EndTime, rec.LeakRecovered = st.EndTime, st.WasLeaked
			if err := r.ledger.FinishSession(ctx, rec); err != nil {
				return err
			}
			rep.LedgerRowsSettled++
			r.repairs.WithLabelValues(resource, "ledger_settled").Inc()
		case st.Status == quota.StatusCancelled:
			// The apply answered 503 and gave the reservation back, but its
			// ledger row landed after all: settle it with nothing charged.
			rec := row
			rec.Status, rec.ChargedAmount, rec.RefundedAmount, rec.OverageAmount = quota.StatusFinished, 0, row.GrantedAmount, 0
			rec.EndTime = st.EndTime
			if err := r.ledger.FinishSession(ctx, rec); err != nil {
				return err
			}
			rep.LedgerRowsSettled++
			r.repairs.WithLabelValues(resource, "ledger_settled").Inc()
		case st.Status == quota.StatusLeaked:
			leaked = append(leaked, quota.LeakedSession{
				ResourceName: resource, SessionID: row.SessionID, PeriodStart: row.PeriodStart,
				Granted: row.GrantedAmount, EndTime: st.EndTime,
			})
		}
	}
	if len(leaked) > 0 {
		if err := r.ledger.MarkLeaked(ctx, leaked); err != nil {
			return err
		}
		rep.LedgerRowsSettled += len(leaked)
		r.repairs.WithLabelValues(resource, "ledger_settled").Add(float64(len(leaked)))
	}
	if len(lost) > 0 {
		if err := r.store.RestoreSessions(ctx, resource, lost, pol.LeaseDuration()); err != nil {
			return err
		}
		rep.SessionsRestored += len(lost)
		r.repairs.WithLabelValues(resource, "session_restored").Add(float64(len(lost)))
	}
	return nil
}

// balance measures the current period's drift twice, Settle apart, and
// corrects it by delta when both reads agree.
func (r *Reconciler) balance(ctx context.Context, pol quota.Policy, rep *Report) error {
	per, err := r.sched.PeriodAt(pol, r.now())
	if err != nil {
		return err
	}
	rep.PeriodStart = per.Start
	measure := func() (quota.Balance, quota.PeriodTotals, error) {
		bal, err := r.store.Balance(ctx, pol.ResourceName, per)
		if err != nil {
			return bal, quota.PeriodTotals{}, err
		}
		tot, err := r.ledger.PeriodTotals(ctx, pol.ResourceName, per.Start)
		return bal, tot, err
	}
	bal, tot, err := measure()
	if err != nil || !bal.Exists {
		return err // no balance yet: it will be seeded from the ledger
	}
	dc, dr := bal.Charged-tot.Charged, bal.Reserved-tot.Reserved
	if dc != 0 || dr != 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.Settle):
		}
		bal2, tot2, err := measure()
		if err != nil {
			return err
		}
		// Correct only when nothing moved on either side for Settle (longer
		// than a ledger write may take): then no request was in flight
		// between the stores, and the difference is real. Under steady
		// traffic this waits for a quiet moment; the drift is reported
		// meanwhile.
		quiet := bal2.Exists && bal2.Charged == bal.Charged && bal2.Reserved == bal.Reserved &&
			tot2 == tot
		if quiet {
			if rep.BalanceAdjusted, err = r.store.Adjust(ctx, pol.ResourceName, per, -dc, -dr); err != nil {
				return err
			}
			if rep.BalanceAdjusted {
				r.repairs.WithLabelValues(pol.ResourceName, "balance_adjusted").Inc()
			}
		}
		bal, tot = bal2, tot2
	}
	rep.RedisCharged, rep.RedisReserved = bal.Charged, bal.Reserved
	rep.LedgerCharged, rep.LedgerReserved = tot.Charged, tot.Reserved
	rep.DriftCharged, rep.DriftReserved = dc, dr
	if g, ok := r.drift[pol.QuotaType.Unit()]; ok {
		g.WithLabelValues(pol.ResourceName, "charged").Set(float64(dc))
		g.WithLabelValues(pol.ResourceName, "reserved").Set(float64(dr))
	}
	return nil
}
