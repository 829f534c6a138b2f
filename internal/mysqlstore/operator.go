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
// deletes. Both read over idx_quota_usage_start (migrations 00004, 00005);
// the usage sums are in usage.go.

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
	query := `SELECT id, ` + strings.Replace(strings.TrimPrefix(selectUsage, "SELECT "),
		"FROM quota_usage ", "FROM quota_usage"+s.dialect.historyIndex+" ", 1) + where +
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
