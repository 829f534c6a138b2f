package lifecycle

import (
	"context"

	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Config configures the job; Defaults gives the documented values.
type Config struct {
	// Interval is the time between passes.
	Interval time.Duration
	// RollupAfter is how long after it was settled a LEAKED or CANCELLED
	// row may still change, and so is kept raw (listed, not summed; the
	// watermark passes it): a late finish trues up a leaked session within
	// QC_FINISHED_RETENTION of its sweep
	// (quota.Service.finishLeakedFromLedger), so it must be at least that.
	// A FINISHED row never changes and is summed at once; a USING one
	// holds the rollup back.
	RollupAfter time.Duration
	// Retention is how long raw rows are kept (by start time); rolled-up
	// rows older than that are deleted. 0 keeps every row.
	Retention time.Duration
	// Batch bounds the rows one rollup step sums, DeleteBatch the rows one
	// delete step deletes; Pause is the wait after each step.
	Batch, DeleteBatch int
	Pause              time.Duration
	// DryRun writes nothing: each pass reports what it would do.
	DryRun bool
	// ClosedPeriodsOnly keeps the rollup out of each resource's current
	// period (the rule before issue 23 §2's hourly rollup of the current
	// period): the watermark stops at the period's start, and every read of
	// the current period (a rebuild's totals, GET /admin/usage) reads its
	// raw rows. False (the default) lets it move up to the hour before
	// now − RecentRows, inside the current period.
	ClosedPeriodsOnly bool
	// Now is the job's clock (nil: time.Now).
	Now func() time.Time
}

// Defaults are the documented defaults (README, docs/operations.md).
func Defaults() Config {
	return Config{Interval: time.Hour, RollupAfter: 25 * time.Hour, Retention: 90 * 24 * time.Hour,
		Batch: 10000, DeleteBatch: 10000, Pause: 100 * time.Millisecond}
}

// Policies reads the policies of the resources a pass visits (their
// periods give each its target); a name without a policy is absent from
// the map. internal/mysqlstore implements it.
type Policies interface {
	PoliciesOf(ctx context.Context, resources []string) (map[string]quota.Policy, error)
}

// CandidatePage is how many resources with ledger rows one Store.Candidates
// statement reads: a pass over R such resources issues R/CandidatePage + 1
// of them and one policy read per page with candidates, whatever the number
// of policies.
const CandidatePage = 1000

// Job is the ledger's lifecycle job.
type Job struct {
	cfg   Config
	store Store
	pols  Policies
	sched quota.Scheduler
	log   *zap.Logger
	m     metrics
	now   func() time.Time
}

// New returns a Job; reg may be nil (no metrics registered).
func New(cfg Config, store Store, pols Policies, sched quota.Scheduler, log *zap.Logger, reg prometheus.Registerer) *Job {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Job{cfg: cfg, store: store, pols: pols, sched: sched, log: log, m: newMetrics(reg), now: now}
}

// Report is what a pass did (or, in a dry run, would do) for one resource.
type Report struct {
	Resource string    `json:"resource"`
	Target   time.Time `json:"target"`   // rows that started before it may be rolled up
	RolledTo time.Time `json:"rolledTo"` // the watermark after the pass
	// Blocked: the rollup stopped at RolledTo, at a USING row.
	Blocked     bool   `json:"blocked"`
	RowsRolled  int64  `json:"rowsRolledUp"`
	RowsDeleted int64  `json:"rowsDeleted"`
	DryRun      bool   `json:"dryRun,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Run runs a pass FirstPassAfter (or Interval, if shorter) after it starts
// and then every Interval until ctx ends; a failed pass is logged and
// counted, and the next one tries again. It returns ctx's error.
func (j *Job) Run(ctx context.Context) error {
	wait := min(FirstPassAfter, j.cfg.Interval)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if _, err := j.Pass(ctx); err != nil && ctx.Err() == nil {
			j.log.Warn("ledger lifecycle pass failed", zap.Error(err))
		}
		wait = j.cfg.Interval
	}
}

// FirstPassAfter is how long after its start an instance runs its first
// pass: not at once, so that a restart (or a test server) does not start
// with a pass, nor a full Interval, so that instances restarted more often
// than that still run it.
const FirstPassAfter = time.Minute

// Pass runs the lifecycle once over the resources that may have rows to
// roll up or delete (Store.Candidates: those with ledger rows past their
// watermark or past the retention; a policy without such rows, as an idle
// one, costs no statement) and returns a report per resource visited, in
// name order. Candidates without a policy (deleted) are skipped, as before
// a policy is created. A resource's failure is in its report (and counted);
// the others go on. Errors: the candidates' or policies' read, or ctx's.
func (j *Job) Pass(ctx context.Context) ([]Report, error) {
	now := j.now()
	var deleteBefore time.Time
	if j.cfg.Retention > 0 {
		deleteBefore = now.Add(-j.cfg.Retention)
	}
	// Every target is at or before this hour (target).
	rollupBefore := now.Add(-RecentRows).UTC().Truncate(time.Hour)
	var reps []Report
	blocked := 0
	for after := ""; ; {
		page, err := j.store.Candidates(ctx, rollupBefore, deleteBefore, after, CandidatePage)
		if err != nil {
			j.m.errors.Inc()
			return reps, fmt.Errorf("ledger lifecycle: candidates: %w", err)
		}
		var pols map[string]quota.Policy
		if len(page.Resources) > 0 {
			if pols, err = j.pols.PoliciesOf(ctx, page.Resources); err != nil {
				j.m.errors.Inc()
				return reps, fmt.Errorf("ledger lifecycle: policies: %w", err)
			}
		}
		for _, r := range page.Resources {
			p, ok := pols[r]
			if !ok {
				continue
			}
			if ctx.Err() != nil {
				return reps, ctx.Err()
			}
			rep := j.Visit(ctx, p)
			if rep.Blocked {
				blocked++
			}
			reps = append(reps, rep)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if !j.cfg.DryRun {
		j.m.blocked.Set(float64(blocked))
	}
	j.m.lastRun.SetToCurrentTime()
	return reps, nil
}

// Visit runs Resource for p as a pass does, logging and counting what it
// did or its failure (in the report's Error): a pass over one resource,
// whether or not it has rows to roll up or delete.
func (j *Job) Visit(ctx context.Context, p quota.Policy) Report {
	rep, err := j.Resource(ctx, p)
	if err != nil {
		rep.Error = err.Error()
		j.m.errors.Inc()
		j.log.Warn("ledger lifecycle failed", zap.String("resource", p.ResourceName), zap.Error(err))
	} else if rep.RowsRolled > 0 || rep.RowsDeleted > 0 || rep.Blocked || rep.DryRun {
		j.log.Info("ledger lifecycle", zap.String("resource", rep.Resource), zap.Bool("dryRun", rep.DryRun),
			zap.Int64("rowsRolledUp", rep.RowsRolled), zap.Int64("rowsDeleted", rep.RowsDeleted),
			zap.Time("rolledTo", rep.RolledTo), zap.Bool("blocked", rep.Blocked))
	}
	return rep
}

// Resource runs the lifecycle of one resource: the rollup up to its
// target, then the deletion of rolled-up rows past the retention.
func (j *Job) Resource(ctx context.Context, pol quota.Policy) (Report, error) {
	now := j.now()
	rep := Report{Resource: pol.ResourceName, DryRun: j.cfg.DryRun}
	target, err := j.target(pol, now)
	if err != nil {
		return rep, err
	}
	rep.Target = target
	settled := now.Add(-j.cfg.RollupAfter)
	var deleteBefore time.Time
	if j.cfg.Retention > 0 {
		deleteBefore = now.Add(-j.cfg.Retention)
	}
	if j.cfg.DryRun {
		pv, err := j.store.Preview(ctx, pol.ResourceName, target, settled, deleteBefore)
		rep.RolledTo, rep.Blocked, rep.RowsRolled, rep.RowsDeleted = pv.RollupTo, pv.Blocked, pv.RowsToRollUp, pv.RowsToDelete
		return rep, err
	}
	for {
		st, err := j.store.RollupStep(ctx, pol.ResourceName, target, settled, j.cfg.Batch)
		if err != nil {
			return rep, err
		}
		rep.RowsRolled += st.Rows
		rep.RolledTo, rep.Blocked = st.RolledTo, st.Blocked
		j.m.rolled.Add(float64(st.Rows))
		if st.Done || st.Blocked {
			break
		}
		if err := j.pause(ctx); err != nil {
			return rep, err
		}
	}
	if deleteBefore.IsZero() {
		return rep, nil
	}
	for {
		st, err := j.store.DeleteStep(ctx, pol.ResourceName, deleteBefore, j.cfg.DeleteBatch)
		if err != nil {
			return rep, err
		}
		rep.RowsDeleted += st.Rows
		j.m.deleted.Add(float64(st.Rows))
		if st.Done {
			return rep, nil
		}
		if err := j.pause(ctx); err != nil {
			return rep, err
		}
	}
}

// RecentRows is how recent a row's start may be and the rollup still
// pass it: none that started in the last hour is rolled up, and the
// watermark stays between RecentRows and RecentRows + 1 h behind now (it
// moves by whole UTC hours). It is the grace of every write that lands a
// row with a start in the past: an apply's row is written within its
// insert deadline (QC_MYSQL_TIMEOUT, seconds) of its start, a gateway
// charge's within a second of it (its start is the request's time), and a
// revived one (quota.Service.revive) takes the retry's start. The one
// writer that lands rows later, reconciliation recording a fail-open
// session once MySQL answers again (internal/reconcile failopen.go, hours
// later after a long outage), goes through the store's late path
// (mysqlstore.Store.InsertLateSession): the row is written under the
// watermark's lock and listed in quota_usage_rollup_deferred when it lands
// below it. RecentRows leaves the rest of the hour for a statement in
// flight and for clocks that disagree between instances.
const RecentRows = time.Hour

// target is where pol's rollup may go now: now − RecentRows, down to the
// UTC hour, inside the current period too (the period's past hours are
// rolled up, so that a read of the current period, as every rebuild's,
// reads its last hour or two raw: docs/performance.md); with
// Config.ClosedPeriodsOnly no further than the current period's start.
// Which rows may still change is RollupStep's check (Config.RollupAfter);
// an open (USING) row stops the rollup, as in a closed period.
func (j *Job) target(pol quota.Policy, now time.Time) (time.Time, error) {
	t := now.Add(-RecentRows)
	if j.cfg.ClosedPeriodsOnly {
		cur, err := j.sched.PeriodAt(pol, now)
		if err != nil {
			return time.Time{}, fmt.Errorf("ledger lifecycle %s: period: %w", pol.ResourceName, err)
		}
		if cur.Start.Before(t) {
			t = cur.Start
		}
	}
	return t.UTC().Truncate(time.Hour), nil
}

// pause waits Pause between two steps.
func (j *Job) pause(ctx context.Context) error {
	if j.cfg.Pause <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(j.cfg.Pause):
		return nil
	}
}
