package mysqlstore

import (
	"context"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

var _ quota.ChargeLedger = (*Store)(nil)

// InsertCharges writes the FINISHED rows of one gateway request's charges
// (quota.Service.Charge: granted = charged = the amount, overage the part
// past the limit, start = end) in one statement: all of them or none, and
// durable (committed) when it returns nil. Concurrent calls are
// group-committed as InsertSession's are, a request's rows always in the
// same statement, and the rows of one statement that share client,
// resource and period are written as one row with their sums (chargeRows).
// PeriodTotals counts them as finished sessions, so seeding and
// reconciliation rebuild balances with them.
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

// chargeRows writes the rows of groups (one group commit's requests) with
// one INSERT statement (s.chargeStmts), the rows of one client on one
// resource and period merged into one row (mergeCharges). If the statement
// fails without an answer from the server (the connection broke: the commit
// may have happened), the merged rows are read back: all there is success,
// so a request whose row went into another request's is not answered a
// failure while its charge is in the ledger.
func (s *Store) chargeRows(ctx context.Context, groups [][]quota.UsageRecord) error {
	return s.writeCharges(ctx, groups, func(ctx context.Context, n int, args []any) error {
		return s.chargeStmts.exec(ctx, nil, n, args)
	})
}

// writeCharges is chargeRows with the statement's execution given (n rows,
// their values in order): tests break it after or before the commit.
func (s *Store) writeCharges(ctx context.Context, groups [][]quota.UsageRecord, exec func(ctx context.Context, n int, args []any) error) error {
	rows := mergeCharges(groups)
	args := make([]any, 0, len(rows)*10)
	for _, r := range rows {
		args = append(args, r.ResourceName, r.ClientID, r.SessionID, msOf(r.PeriodStart),
			r.ApplyAmount, r.GrantedAmount, r.ChargedAmount, r.OverageAmount, msOf(r.StartTime), msOf(r.EndTime))
	}
	err := exec(ctx, len(rows), args)
	if err == nil || !isUnavailable(err) {
		return err
	}
	if s.chargesWritten(rows) {
		return nil
	}
	return err
}

// chargesWritten reads back rows by session id on a fresh deadline: true
// when every one of them is in the ledger as written (resource, amount and
// times; a session id taken by another row does not count). A read that
// fails is false.
func (s *Store) chargesWritten(rows []quota.UsageRecord) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	ids := make([]any, len(rows))
	want := make(map[string]quota.UsageRecord, len(rows))
	for i, r := range rows {
		ids[i] = r.SessionID
		want[r.SessionID] = r
	}
	q := `SELECT session_id, resource_name, charged_amount, start_ms, end_ms, status FROM quota_usage WHERE session_id IN (?` +
		strings.Repeat(", ?", len(rows)-1) + `)`
	res, err := s.db.QueryContext(ctx, q, ids...)
	if err != nil {
		return false
	}
	defer res.Close()
	found := 0
	for res.Next() {
		var id, resource, status string
		var charged, start, end int64
		if res.Scan(&id, &resource, &charged, &start, &end, &status) != nil {
			return false
		}
		w := want[id]
		if w.ResourceName == resource && w.ChargedAmount == charged && msOf(w.StartTime) == start &&
			msOf(w.EndTime) == end && status == string(quota.StatusFinished) {
			found++
		}
	}
	return res.Err() == nil && found == len(rows)
}

// mergeCharges turns the rows of one group commit into the rows written:
// the rows of one client on one resource and period become one (the first
// one's session id; apply, granted, charged and overage summed; the
// earliest start and the latest end), as long as the sums stay within
// quota.MaxAmount. A gateway answers one Envoy request with one charge per
// descriptor, so under load one statement carried ~17 rows of the same
// resource and client; each ledger row cost MariaDB ~20 µs of CPU (its
// four secondary index entries), the statement about as much as a few
// rows. What the ledger is read for keeps its value: the period totals
// (seeding, reconciliation), usage per client and period, overage. What
// a merged row no longer tells is each request (it never had an id the
// caller knows) and the number of requests: /admin/usage's sessions
// counts rows. Rows are in order of first appearance.
func mergeCharges(groups [][]quota.UsageRecord) []quota.UsageRecord {
	type key struct {
		resource, client string
		period           int64
	}
	var rows []quota.UsageRecord
	at := map[key]int{}
	for _, recs := range groups {
		for _, r := range recs {
			k := key{r.ResourceName, r.ClientID, msOf(r.PeriodStart)}
			i, ok := at[k]
			if ok && fits(rows[i], r) {
				m := &rows[i]
				m.ApplyAmount += r.ApplyAmount
				m.GrantedAmount += r.GrantedAmount
				m.ChargedAmount += r.ChargedAmount
				m.OverageAmount += r.OverageAmount
				if r.StartTime.Before(m.StartTime) {
					m.StartTime = r.StartTime
				}
				if r.EndTime.After(m.EndTime) {
					m.EndTime = r.EndTime
				}
				continue
			}
			at[k] = len(rows)
			rows = append(rows, r)
		}
	}
	return rows
}

// fits reports whether r's amounts can be added to m's within
// quota.MaxAmount (the largest amount a row holds anywhere else).
func fits(m, r quota.UsageRecord) bool {
	return m.ApplyAmount <= quota.MaxAmount-r.ApplyAmount && m.GrantedAmount <= quota.MaxAmount-r.GrantedAmount &&
		m.ChargedAmount <= quota.MaxAmount-r.ChargedAmount && m.OverageAmount <= quota.MaxAmount-r.OverageAmount
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
