package mysqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// This file holds the ledger reads and policy changes of the operators'
// surface (internal/admin): session history, usage sums, manual resets and
// deletes. Both read over idx_quota_usage_start (migrations 00004, 00005).

// SessionHistory returns a page of q.Resource's ledger rows, the latest
// started first (ties by id, highest first), after q.Before. It reads at
// most q.Scan rows (the index range after q.Before, no filesort) and keeps
// those matching q.Statuses, q.ClientID and q.Line, up to q.Limit. Errors: one
// wrapping quota.ErrUnavailable when the database cannot be reached.
func (s *Store) SessionHistory(ctx context.Context, q quota.HistoryQuery) (quota.HistoryPage, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	scan := max(q.Scan, q.Limit)
	where := `WHERE resource_name = ?`
	args := []any{q.Resource}
	if q.Before != (quota.HistoryPos{}) {
		// Written so that the start_ms bound is a plain index range on
		// both MySQL and SQLite; the id test only separates ties.
		where += ` AND start_ms <= ? AND (start_ms < ? OR id < ?)`
		args = append(args, q.Before.StartMs, q.Before.StartMs, q.Before.ID)
	}
	var rows []struct {
		ID int64 `db:"id"`
		usageRow
	}
	query := `SELECT id, ` + strings.TrimPrefix(selectUsage, "SELECT ") + where +
		` ORDER BY start_ms DESC, id DESC LIMIT ?`
	if err := s.db.SelectContext(ctx, &rows, query, append(args, scan)...); err != nil {
		return quota.HistoryPage{}, translate("session history "+q.Resource, err)
	}
	page := quota.HistoryPage{Rows: []quota.HistoryRow{}, Next: q.Before, More: len(rows) == scan}
	for _, r := range rows {
		pos := quota.HistoryPos{StartMs: r.StartMs, ID: r.ID}
		if (len(q.Statuses) == 0 || slices.Contains(q.Statuses, quota.Status(r.Status))) &&
			(q.ClientID == "" || q.ClientID == r.ClientID) && (q.Line == "" || q.Line == r.BusinessLine) {
			if len(page.Rows) == q.Limit {
				page.More = true
				break
			}
			page.Rows = append(page.Rows, quota.HistoryRow{UsageRecord: r.record(), Pos: pos})
		}
		page.Next = pos
	}
	return page, nil
}

// usageSums are the aggregate columns of Usage, the same for each grouping.
const usageSums = `COUNT(*) AS sessions,
	COALESCE(SUM(CASE WHEN status = 'USING' THEN 1 ELSE 0 END), 0) AS open,
	COALESCE(SUM(granted_amount), 0) AS granted,
	COALESCE(SUM(CASE WHEN status <> 'USING' THEN charged_amount ELSE 0 END), 0) AS charged,
	COALESCE(SUM(CASE WHEN status = 'USING' THEN charged_amount ELSE 0 END), 0) AS reserved,
	COALESCE(SUM(refunded_amount), 0) AS refunded,
	COALESCE(SUM(overage_amount), 0) AS overage,
	COALESCE(SUM(CASE WHEN status = 'LEAKED' OR leak_recovered = 1 THEN 1 ELSE 0 END), 0) AS leaked`

// UsageSQL is the statement Usage runs for a grouping (client, line, hour
// or day), with the arguments resource, from ms, to ms and the group limit. It
// is exported for the query-plan check (docs/operations.md shows its
// EXPLAIN).
func UsageSQL(groupBy string) (string, error) {
	var key string
	switch groupBy {
	case quota.GroupByClient:
		key = `client_id`
	case quota.GroupByLine:
		key = `business_line`
	case quota.GroupByHour:
		key = `start_ms - start_ms % 3600000`
	case quota.GroupByDay:
		key = `start_ms - start_ms % 86400000`
	default:
		return "", fmt.Errorf("unknown grouping %q", groupBy)
	}
	return `SELECT ` + key + ` AS k, ` + usageSums + `
	FROM quota_usage WHERE resource_name = ? AND start_ms >= ? AND start_ms < ?
	GROUP BY k ORDER BY k LIMIT ?`, nil
}

// Usage sums q.Resource's ledger rows that started in [q.From, q.To) per
// group (see quota.UsageQuery); hours and days are UTC. It reads the index
// idx_quota_usage_start only, never the table rows. Errors: one wrapping
// quota.ErrUnavailable when the database cannot be reached.
func (s *Store) Usage(ctx context.Context, q quota.UsageQuery) (quota.UsageResult, error) {
	query, err := UsageSQL(q.GroupBy)
	if err != nil {
		return quota.UsageResult{}, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []struct {
		Key      string `db:"k"`
		Sessions int64  `db:"sessions"`
		Open     int64  `db:"open"`
		Granted  int64  `db:"granted"`
		Charged  int64  `db:"charged"`
		Reserved int64  `db:"reserved"`
		Refunded int64  `db:"refunded"`
		Overage  int64  `db:"overage"`
		Leaked   int64  `db:"leaked"`
	}
	if err := s.db.SelectContext(ctx, &rows, query, q.Resource, msOf(q.From), msOf(q.To), q.MaxGroups+1); err != nil {
		return quota.UsageResult{}, translate("usage "+q.Resource, err)
	}
	out := quota.UsageResult{Groups: make([]quota.UsageGroup, 0, len(rows))}
	if len(rows) > q.MaxGroups {
		rows, out.Truncated = rows[:q.MaxGroups], true
	}
	for _, r := range rows {
		g := quota.UsageGroup{Sessions: r.Sessions, Open: r.Open, Granted: r.Granted, Charged: r.Charged,
			Reserved: r.Reserved, Refunded: r.Refunded, Overage: r.Overage, Leaked: r.Leaked}
		if q.GroupBy == quota.GroupByClient || q.GroupBy == quota.GroupByLine {
			g.Key = r.Key
		} else {
			var ms int64
			if _, err := fmt.Sscan(r.Key, &ms); err != nil {
				return quota.UsageResult{}, fmt.Errorf("usage %s: bucket %q: %w", q.Resource, r.Key, err)
			}
			g.Start = timeOf(ms)
		}
		out.Groups = append(out.Groups, g)
	}
	return out, nil
}

// ResetPeriod starts a new period sequence of resource at at (stored in
// period_anchor_ms, to the millisecond) and returns the policy as stored.
// Errors: one wrapping quota.ErrResourceNotFound when there is no such
// policy, quota.ErrUnavailable when the database cannot be reached.
func (s *Store) ResetPeriod(ctx context.Context, resource string, at time.Time) (quota.Policy, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `UPDATE quota_policy SET period_anchor_ms = ?, updated_ms = ? WHERE resource_name = ?`,
		msOf(at), msOf(at), resource)
	if err != nil {
		return quota.Policy{}, translate("reset period "+resource, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return quota.Policy{}, fmt.Errorf("reset period %s: %w", resource, quota.ErrResourceNotFound)
	}
	return s.GetPolicy(ctx, resource)
}

// DeletePolicy removes the policy of resource; its ledger rows and audit
// entries stay. Errors: one wrapping quota.ErrResourceNotFound when there is
// no such policy, quota.ErrUnavailable when the database cannot be reached.
func (s *Store) DeletePolicy(ctx context.Context, resource string) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `DELETE FROM quota_policy WHERE resource_name = ?`, resource)
	if err != nil {
		return translate("delete policy "+resource, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("delete policy %s: %w", resource, quota.ErrResourceNotFound)
	}
	return nil
}
