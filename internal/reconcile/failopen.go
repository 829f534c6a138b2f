package reconcile

import (
	"context"
	"errors"
	"strings"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// recordFailOpen writes the ledger rows of fail-open grants that Redis
// counted while MySQL was unreachable, settling them as Redis did since. It
// runs on every pass, before any drift is measured, so such a grant is never
// mistaken for drift.
//
// A session's id may be in the ledger already as another session's: one of
// another resource or another client, or an earlier one of the same client
// that Redis no longer holds (ids are scoped to resource and client,
// internal/quota scope.go; the ledger's unique key is on the stored id).
// Only the row this session's apply wrote (its resource, client, period and
// start) counts as its own; otherwise the session is recorded as the apply
// path records it then (errScoped: the apply is made again under the scoped
// id): its Redis session moves to the scoped id (Store.ScopeFailOpen) and
// its row is written there, so no grant is lost and none counted twice
// (open finding A, docs/pools.md §5). A pools' session's row carries the
// line and the split its grant drew (SessionState.FailOpenDrawn), as the
// apply path's row does, so that a rebuild of the pool counters from the
// ledger counts it (open finding B).
func (r *Reconciler) recordFailOpen(ctx context.Context, pol quota.Policy, rep *Report) error {
	resource := pol.ResourceName
	var ids []string
	err := r.redis(pol.ResourceName, func() (err error) { ids, err = r.store.FailOpenSessions(ctx, resource); return err })
	if err != nil || len(ids) == 0 {
		return err
	}
	rows, err := r.sessionsByID(ctx, ids)
	if err != nil {
		return err
	}
	states, err := r.sessions(ctx, resource, ids)
	if err != nil {
		return err
	}
	var done []string
	for _, id := range ids {
		st, ok := states[id]
		if !ok {
			done = append(done, id) // expired from Redis
			continue
		}
		stored, recorded, err := r.failOpenID(ctx, pol, id, st, rows)
		if err != nil {
			return err
		}
		switch {
		case stored == "":
			continue // not recordable now (logged); left flagged
		case recorded:
			done = append(done, stored) // its own row landed after all
			continue
		}
		ok, err = r.recordFailOpenSession(ctx, resource, stored, st)
		if err != nil {
			return err
		}
		if !ok {
			continue // another session's row took the id meanwhile: the next pass scopes it
		}
		done = append(done, stored)
		rep.FailOpenRecorded++
		r.repairs.WithLabelValues(resource, "fail_open_recorded").Inc()
	}
	return r.redis(pol.ResourceName, func() error { return r.store.AckFailOpen(ctx, resource, done) })
}

// failOpenID decides under which stored id the fail-open session st, stored
// under id in Redis, is recorded: id when the ledger has no row there
// (recorded false) or this session's own (recorded true), else its scoped
// id, to which it moves the Redis session first, or "" when it cannot be
// recorded now (a warning is logged; the session stays flagged until a
// later pass can, or Redis forgets it). rows are the ledger rows of the
// flagged ids.
func (r *Reconciler) failOpenID(ctx context.Context, pol quota.Policy, id string, st quota.SessionState,
	rows map[string]quota.UsageRecord) (stored string, recorded bool, err error) {
	resource := pol.ResourceName
	row, ok := rows[id]
	if !ok {
		return id, false, nil
	}
	if ownRow(row, resource, st) {
		return id, true, nil
	}
	// The id's row is another session's. A bare id of a caller with a
	// client id has a scoped form (scope.go); a scoped id, or a session of
	// a caller without one, has none. Nor has the same client's earlier
	// session under the bare id: a finish of (resource, client, id) is
	// answered from that row and never looks further (quota Finish).
	why := ""
	switch {
	case st.ClientID == "" || strings.Contains(id, "/"):
		why = "the id has no scoped form"
	case row.ResourceName == resource && row.ClientID == st.ClientID:
		why = "the id's row is an earlier session of the same client"
	case r.cfg.GlobalSessionIDs:
		why = "scoped session ids are off (QC_GLOBAL_SESSION_IDS)"
	}
	if why != "" {
		r.log.Warn("fail-open session not recorded: its id's ledger row is another session's",
			zap.String("resource", resource), zap.String("session_id", id), zap.String("reason", why))
		return "", false, nil
	}
	scoped := quota.ScopedSessionID(resource, st.ClientID, id)
	srows, err := r.sessionsByID(ctx, []string{scoped})
	if err != nil {
		return "", false, err
	}
	if srow, ok := srows[scoped]; ok && !ownRow(srow, resource, st) {
		r.log.Warn("fail-open session not recorded: its id's ledger rows, bare and scoped, are other sessions'",
			zap.String("resource", resource), zap.String("session_id", id))
		return "", false, nil
	}
	var moved bool
	err = r.redis(resource, func() (err error) {
		moved, err = r.store.ScopeFailOpen(ctx, resource, id, scoped, st.ClientID)
		return err
	})
	if err != nil || !moved {
		return "", false, err // changed meanwhile (finished and expired, say): the next pass sees
	}
	r.repairs.WithLabelValues(resource, "fail_open_scoped").Inc()
	_, recorded = srows[scoped]
	return scoped, recorded, nil
}

// ownRow reports whether a ledger row is the one the apply of the Redis
// session st on resource wrote (or would have): same resource, client,
// period and start.
func ownRow(row quota.UsageRecord, resource string, st quota.SessionState) bool {
	return row.ResourceName == resource && row.ClientID == st.ClientID &&
		row.PeriodStart.Equal(st.PeriodStart) && row.StartTime.Equal(st.StartTime)
}

// recordFailOpenSession writes the ledger row of the fail-open session st
// stored under id and settles it as Redis did. It reports false, having
// written nothing, when another session's row took id meanwhile.
func (r *Reconciler) recordFailOpenSession(ctx context.Context, resource, id string, st quota.SessionState) (bool, error) {
	rec := quota.UsageRecord{
		ResourceName: resource, ClientID: st.ClientID, SessionID: id, PeriodStart: st.PeriodStart,
		ApplyAmount: st.ApplyAmount, MinAmount: st.MinAmount, GrantedAmount: st.Granted,
		ChargedAmount: st.Granted, StartTime: st.StartTime, Status: quota.StatusUsing,
		BusinessLine: st.BusinessLine,
	}
	if st.FailOpenDrawn != nil {
		rec.Drawn = *st.FailOpenDrawn
	}
	err := r.mysql(func() error { return r.insertLate(ctx, rec) })
	if errors.Is(err, quota.ErrDuplicateSession) {
		again, rerr := r.sessionsByID(ctx, []string{id})
		if rerr != nil {
			return false, rerr
		}
		if row, ok := again[id]; !ok || !ownRow(row, resource, st) {
			return false, nil
		}
		err = nil // this session's row, landed after all
	}
	if err != nil {
		return false, err
	}
	switch st.Status {
	case quota.StatusFinished:
		rec.Status, rec.ChargedAmount, rec.RefundedAmount, rec.OverageAmount = quota.StatusFinished, st.Actual, st.Refunded, st.Overage
		rec.EndTime, rec.LeakRecovered = st.EndTime, st.WasLeaked
		err = r.finishSession(ctx, rec)
	case quota.StatusLeaked:
		err = r.markLeaked(ctx, []quota.LeakedSession{{
			ResourceName: resource, SessionID: id, ClientID: st.ClientID, PeriodStart: st.PeriodStart, Granted: st.Granted,
			EndTime: st.EndTime,
		}})
	}
	return err == nil, err
}

// lateInserter is a ledger that writes rows that may start below its
// lifecycle's watermark (mysqlstore.Store.InsertLateSession): a fail-open
// session's start is as old as the outage, and the watermark moves up to
// an hour or two behind now (internal/lifecycle).
type lateInserter interface {
	InsertLateSession(ctx context.Context, rec quota.UsageRecord) error
}

// insertLate writes a fail-open session's row through the ledger's late
// path when it has one (listed if it lands below the watermark, so that
// the period totals count it), else through InsertSession.
func (r *Reconciler) insertLate(ctx context.Context, rec quota.UsageRecord) error {
	if l, ok := r.ledger.(lateInserter); ok {
		return l.InsertLateSession(ctx, rec)
	}
	return r.ledger.InsertSession(ctx, rec)
}
