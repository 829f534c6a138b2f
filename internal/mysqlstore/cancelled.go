package mysqlstore

import (
	"context"
	"errors"

	"github.com/quotacenter/quota-center/internal/quota"
)

// CancelSession marks the row of rec.SessionID CANCELLED with nothing
// charged: charged_amount 0, refunded_amount = granted_amount, overage 0,
// end_ms = rec.EndTime. It matches only the USING row that rec's apply
// wrote: same resource, start time (to the millisecond), grant and period
// start, so that a retry of the same apply that has made the row its own
// since (ReviveSession moves start_ms) is left alone. A missing or other row
// is left as it is, without error; the call is idempotent.
//
// It closes the rest of docs/reliability.md G1: the apply answered 503 after
// an INSERT whose outcome was unknown, and the ledger must not hold a live
// session for it however long Redis keeps its tombstone.
//
// Errors: one wrapping quota.ErrUnavailable when the database cannot be
// reached.
func (s *Store) CancelSession(ctx context.Context, rec quota.UsageRecord) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, `UPDATE quota_usage SET status = 'CANCELLED', charged_amount = 0,
		refunded_amount = granted_amount, overage_amount = 0, end_ms = ?
		WHERE session_id = ? AND status = 'USING' AND resource_name = ? AND start_ms = ?
		AND granted_amount = ? AND period_start_ms = ?`,
		nullMsOf(rec.EndTime), rec.SessionID, rec.ResourceName, msOf(rec.StartTime),
		rec.GrantedAmount, msOf(rec.PeriodStart))
	if err != nil {
		return translate("cancel session "+rec.SessionID, err)
	}
	return nil
}

// ReviveSession makes the row of rec.SessionID the USING row of rec (a
// retry of an apply whose earlier attempt answered 503): period start,
// granted and charged amounts (= the grant), start time, business line and
// draws from rec, nothing refunded, no end time. It matches a row of the
// same apply (resource, client, apply and min amounts) that is CANCELLED,
// or USING with rec's grant and period start (an earlier attempt's row that
// landed behind a lost answer: its start time moves to rec's, so the
// earlier attempt's CancelSession no longer matches it). It reports whether
// the row is rec's afterwards.
//
// Errors: one wrapping quota.ErrUnavailable when the database cannot be
// reached.
func (s *Store) ReviveSession(ctx context.Context, rec quota.UsageRecord) (bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `UPDATE quota_usage SET status = 'USING', period_start_ms = ?,
		granted_amount = ?, charged_amount = ?, refunded_amount = 0, overage_amount = 0, start_ms = ?,
		end_ms = NULL, leak_recovered = 0, business_line = ?, drawn_dedicated = ?, drawn_shared = ?,
		drawn_buffer = ?, drawn_grant = ?, drawn_grants = ?
		WHERE session_id = ? AND resource_name = ? AND client_id = ? AND apply_amount = ? AND min_amount = ?
		AND (status = 'CANCELLED' OR (status = 'USING' AND granted_amount = ? AND period_start_ms = ?))`,
		msOf(rec.PeriodStart), rec.GrantedAmount, rec.GrantedAmount, msOf(rec.StartTime),
		rec.BusinessLine, rec.Drawn.Dedicated, rec.Drawn.Shared, rec.Drawn.Buffer+rec.Drawn.Base,
		rec.Drawn.Grant, rec.Drawn.Grants,
		rec.SessionID, rec.ResourceName, rec.ClientID, rec.ApplyAmount, rec.MinAmount,
		rec.GrantedAmount, msOf(rec.PeriodStart))
	if err != nil {
		return false, translate("revive session "+rec.SessionID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return true, nil
	}
	// MySQL counts changed rows only (ClientFoundRows is off): a row that
	// already held exactly rec's values is rec's too.
	row, err := s.Session(ctx, rec.SessionID)
	if errors.Is(err, quota.ErrSessionNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return row.Status == quota.StatusUsing && row.ResourceName == rec.ResourceName && row.ClientID == rec.ClientID &&
		row.ApplyAmount == rec.ApplyAmount && row.MinAmount == rec.MinAmount &&
		msOf(row.StartTime) == msOf(rec.StartTime) && row.GrantedAmount == rec.GrantedAmount &&
		msOf(row.PeriodStart) == msOf(rec.PeriodStart), nil
}
