package mysqlstore

import (
	"context"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

var _ quota.ChargeLedger = (*Store)(nil)

// InsertCharges writes the FINISHED rows of one gateway request's charges
// (quota.Service.Charge: granted = charged = the amount, overage the part
// past the limit, start = end) in one statement: all of them or none.
// Concurrent calls are group-committed as InsertSession's are, a request's
// rows always in the same statement. PeriodTotals counts them as finished
// sessions, so seeding and reconciliation rebuild balances with them.
//
// Errors: one wrapping quota.ErrDuplicateSession when a session id is
// already in the ledger, quota.ErrUnavailable when the database cannot be
// reached or the store is closed.
func (s *Store) InsertCharges(ctx context.Context, recs []quota.UsageRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return s.charges.do(ctx, recs)
}

// chargeColumns and chargeValues are one row of the group-commit INSERT of
// charges.
const (
	chargeColumns = `INSERT INTO quota_usage (resource_name, client_id, session_id, period_start_ms,
	apply_amount, min_amount, granted_amount, charged_amount, overage_amount, start_ms, end_ms, status) VALUES `
	chargeValues = `(?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, 'FINISHED')`
)

// chargeSQL is the group-commit INSERT of n charge rows.
func chargeSQL(n int) string {
	var b strings.Builder
	b.Grow(len(chargeColumns) + n*(len(chargeValues)+2))
	b.WriteString(chargeColumns)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(chargeValues)
	}
	return b.String()
}

// chargeRows writes every row of groups with one INSERT statement
// (s.chargeStmts).
func (s *Store) chargeRows(ctx context.Context, groups [][]quota.UsageRecord) error {
	args := make([]any, 0, len(groups)*10)
	n := 0
	for _, recs := range groups {
		for _, r := range recs {
			n++
			args = append(args, r.ResourceName, r.ClientID, r.SessionID, msOf(r.PeriodStart),
				r.ApplyAmount, r.GrantedAmount, r.ChargedAmount, r.OverageAmount, msOf(r.StartTime), msOf(r.EndTime))
		}
	}
	return s.chargeStmts.exec(ctx, nil, n, args)
}

// chargeOp group-commits InsertCharges; on, if set, sees each group's
// requests.
func (s *Store) chargeOp(on func(op string, rows int)) batchOp[[]quota.UsageRecord] {
	return batchOp[[]quota.UsageRecord]{name: "insert charges", id: firstSessionID, write: s.chargeRows,
		fail:    func(recs []quota.UsageRecord, err error) error { return insertError(firstSessionID(recs), err) },
		observe: observer(on, "charge")}
}

// firstSessionID names a request's charges by its first row.
func firstSessionID(recs []quota.UsageRecord) string {
	if len(recs) == 0 {
		return ""
	}
	return recs[0].SessionID
}
