package reconcile

import (
	"context"

	"github.com/quotacenter/quota-center/internal/quota"
)

// syncLimit makes Redis' limit the policy's: concurrent PUTs of one policy
// can finish their MySQL and Redis writes in different orders.
func (r *Reconciler) syncLimit(ctx context.Context, pol quota.Policy, rep *Report) error {
	per, err := r.sched.PeriodAt(pol, r.now())
	if err != nil {
		return err
	}
	var bal quota.Balance
	err = r.redis(pol.ResourceName, func() (err error) { bal, err = r.store.Balance(ctx, pol.ResourceName, per); return err })
	if err != nil || bal.Limit == pol.TotalLimit || (!bal.Exists && bal.Limit == 0) {
		return err
	}
	// Read the policy again right before writing: a PUT may have landed.
	cur, err := r.policy(ctx, pol.ResourceName)
	if err != nil || cur.TotalLimit == bal.Limit {
		return err
	}
	if err := r.redis(pol.ResourceName, func() error { return r.store.SetLimit(ctx, pol.ResourceName, cur.TotalLimit) }); err != nil {
		return err
	}
	rep.LimitSynced = true
	r.repairs.WithLabelValues(pol.ResourceName, "limit_synced").Inc()
	return nil
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

// releaseOrphans gives back Redis reservations that have no ledger row, or
// a CANCELLED one (an apply answered 503).
func (r *Reconciler) releaseOrphans(ctx context.Context, pol quota.Policy, rep *Report) error {
	resource := pol.ResourceName
	// Only sessions untouched (no apply, no heartbeat) for Grace can be
	// orphans: their lease ends before now + lease − Grace.
	var ids []string
	err := r.redis(pol.ResourceName, func() (err error) {
		ids, err = r.store.OpenSessionIDs(ctx, resource, r.now().Add(pol.LeaseDuration()-r.cfg.Grace))
		return err
	})
	if err != nil || len(ids) == 0 {
		return err
	}
	return inChunks(ids, checkChunk, func(ids []string) error {
		rows, err := r.sessionsByID(ctx, ids)
		if err != nil {
			return err
		}
		var missing []string
		for _, id := range ids {
			if row, ok := rows[id]; !ok || row.Status == quota.StatusCancelled {
				missing = append(missing, id) // no row, or one of an apply answered 503
			}
		}
		if len(missing) == 0 {
			return nil
		}
		states, err := r.sessions(ctx, resource, missing)
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
			if again, err := r.sessionsByID(ctx, []string{id}); err != nil || (len(again) > 0 && again[id].Status != quota.StatusCancelled) {
				continue
			}
			if err := r.redis(pol.ResourceName, func() error { return r.store.Cancel(ctx, resource, id) }); err != nil {
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
		var open []quota.UsageRecord
		var next int64
		err := r.mysql(func() (err error) {
			open, next, err = r.ledger.OpenSessionsPage(ctx, pol.ResourceName, after, checkChunk)
			return err
		})
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
	states, err := r.sessions(ctx, resource, ids)
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
			if err := r.finishSession(ctx, rec); err != nil {
				return err
			}
			rep.LedgerRowsSettled++
			r.repairs.WithLabelValues(resource, "ledger_settled").Inc()
		case st.Status == quota.StatusCancelled:
			// The apply answered 503 and gave the reservation back, but its
			// ledger row landed after all: settle it CANCELLED, nothing
			// charged (as the service marks it; a retry starts afresh).
			rec := row
			rec.EndTime = st.EndTime
			if err := r.mysql(func() error { return r.ledger.CancelSession(ctx, rec) }); err != nil {
				return err
			}
			rep.LedgerRowsSettled++
			r.repairs.WithLabelValues(resource, "ledger_settled").Inc()
		case st.Status == quota.StatusLeaked:
			leaked = append(leaked, quota.LeakedSession{
				ResourceName: resource, SessionID: row.SessionID, ClientID: row.ClientID, PeriodStart: row.PeriodStart,
				Granted: row.GrantedAmount, EndTime: st.EndTime,
			})
		}
	}
	if len(leaked) > 0 {
		if err := r.markLeaked(ctx, leaked); err != nil {
			return err
		}
		rep.LedgerRowsSettled += len(leaked)
		r.repairs.WithLabelValues(resource, "ledger_settled").Add(float64(len(leaked)))
	}
	if len(lost) > 0 {
		if err := r.redis(pol.ResourceName, func() error { return r.store.RestoreSessions(ctx, resource, lost, pol.LeaseDuration()) }); err != nil {
			return err
		}
		rep.SessionsRestored += len(lost)
		r.repairs.WithLabelValues(resource, "session_restored").Add(float64(len(lost)))
	}
	return nil
}

// sessions reads Redis sessions by id, through the balance store's breaker.
func (r *Reconciler) sessions(ctx context.Context, resource string, ids []string) (map[string]quota.SessionState, error) {
	return quota.Guard(r.cfg.Breakers.BalancesFor(resource), func() (map[string]quota.SessionState, error) {
		return r.store.Sessions(ctx, resource, ids)
	})
}

// sessionsByID reads ledger rows by id, through the ledger's breaker.
func (r *Reconciler) sessionsByID(ctx context.Context, ids []string) (map[string]quota.UsageRecord, error) {
	return quota.Guard(r.cfg.Breakers.Ledger, func() (map[string]quota.UsageRecord, error) {
		return r.ledger.SessionsByID(ctx, ids)
	})
}

// finishSession settles a ledger row, through the ledger's breaker.
func (r *Reconciler) finishSession(ctx context.Context, rec quota.UsageRecord) error {
	return r.mysql(func() error { return r.ledger.FinishSession(ctx, rec) })
}

// markLeaked marks ledger rows LEAKED, through the ledger's breaker.
func (r *Reconciler) markLeaked(ctx context.Context, leaks []quota.LeakedSession) error {
	return r.mysql(func() error { return r.ledger.MarkLeaked(ctx, leaks) })
}
