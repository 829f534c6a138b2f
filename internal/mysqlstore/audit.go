package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

var _ quota.AuditLog = (*Store)(nil)

type auditRow struct {
	ID           int64          `db:"id"`
	AtMs         int64          `db:"at_ms"`
	Actor        string         `db:"actor"`
	Action       string         `db:"action"`
	ResourceName string         `db:"resource_name"`
	BeforeJSON   sql.NullString `db:"before_json"`
	AfterJSON    sql.NullString `db:"after_json"`
	Reason       string         `db:"reason"`
}

// RecordAudit appends e to quota_audit. At is stored in Unix milliseconds;
// a nil Before or After is stored as NULL. Errors: one wrapping
// quota.ErrUnavailable when the database cannot be reached.
func (s *Store) RecordAudit(ctx context.Context, e quota.AuditEntry) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, `INSERT INTO quota_audit
		(at_ms, actor, action, resource_name, before_json, after_json, reason) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		msOf(e.At), e.Actor, e.Action, e.Resource, nullJSON(e.Before), nullJSON(e.After), e.Reason)
	if err != nil {
		return translate("record audit "+e.Action+" "+e.Resource, err)
	}
	return nil
}

// ListAudit reads the entries matching f, newest (highest id) first: of
// f.Resource, by f.Actor and of f.Action when not empty, with ids below f.BeforeID when positive, at
// most f.Limit (quota.DefaultAuditLimit when not positive). It returns an
// empty, non-nil slice when none match. Errors: one wrapping
// quota.ErrUnavailable when the database cannot be reached.
func (s *Store) ListAudit(ctx context.Context, f quota.AuditFilter) ([]quota.AuditRecord, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if f.Limit <= 0 {
		f.Limit = quota.DefaultAuditLimit
	}
	var where []string
	var args []any
	if f.Resource != "" {
		where = append(where, "resource_name = ?")
		args = append(args, f.Resource)
	}
	if f.Actor != "" {
		where = append(where, "actor = ?")
		args = append(args, f.Actor)
	}
	if f.Action != "" {
		where = append(where, "action = ?")
		args = append(args, f.Action)
	}
	if f.BeforeID > 0 {
		where = append(where, "id < ?")
		args = append(args, f.BeforeID)
	}
	q := `SELECT id, at_ms, actor, action, resource_name, before_json, after_json, reason FROM quota_audit`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, f.Limit)
	var rows []auditRow
	if err := s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, translate("list audit", err)
	}
	out := make([]quota.AuditRecord, 0, len(rows))
	for _, r := range rows {
		out = append(out, quota.AuditRecord{ID: r.ID, AuditEntry: quota.AuditEntry{
			At: timeOf(r.AtMs), Actor: r.Actor, Action: r.Action, Resource: r.ResourceName,
			Before: rawJSON(r.BeforeJSON), After: rawJSON(r.AfterJSON), Reason: r.Reason,
		}})
	}
	return out, nil
}

// nullJSON stores nil (or JSON null) as SQL NULL.
func nullJSON(b json.RawMessage) sql.NullString {
	if len(b) == 0 || string(b) == "null" {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}
