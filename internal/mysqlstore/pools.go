package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// PoolSettings reads a resource's pool settings; ok is false when none were
// set (pools.DefaultSettings apply). Errors: quota.ErrUnavailable.
func (s *Store) PoolSettings(ctx context.Context, resource string) (ps pools.Settings, ok bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	ps, ok, err = readPoolSettings(ctx, s.db, resource)
	return ps, ok, orNil("get pool settings "+resource, err)
}

// readPoolSettings is PoolSettings on q (the database or a transaction).
func readPoolSettings(ctx context.Context, q sqlx.QueryerContext, resource string) (pools.Settings, bool, error) {
	var r struct {
		Shared    int64  `db:"shared_percent"`
		Dedicated int64  `db:"dedicated_percent"`
		Buffer    int64  `db:"buffer_percent"`
		Borrow    int64  `db:"borrow_limit_percent"`
		Elastic   string `db:"elasticity"`
		Threshold int64  `db:"reclaim_threshold_percent"`
		Confirm   int64  `db:"reclaim_confirm_seconds"`
		DryRun    bool   `db:"reclaim_dry_run"`
	}
	err := sqlx.GetContext(ctx, q, &r, `SELECT shared_percent, dedicated_percent, buffer_percent, borrow_limit_percent,
		elasticity, reclaim_threshold_percent, reclaim_confirm_seconds, reclaim_dry_run
		FROM quota_pool_settings WHERE resource_name = ?`, resource)
	if errors.Is(err, sql.ErrNoRows) {
		return pools.DefaultSettings(), false, nil
	}
	if err != nil {
		return pools.Settings{}, false, err
	}
	return pools.Settings{SharedPercent: r.Shared, DedicatedPercent: r.Dedicated, BufferPercent: r.Buffer,
		BorrowLimitPercent: r.Borrow, Elasticity: pools.Elasticity(r.Elastic), ReclaimThresholdPercent: r.Threshold,
		ReclaimConfirmSeconds: r.Confirm, ReclaimDryRun: r.DryRun}, true, nil
}

// PutPoolSettings stores a resource's pool settings (validated by the
// caller). Errors: quota.ErrUnavailable.
func (s *Store) PutPoolSettings(ctx context.Context, resource string, ps pools.Settings, at time.Time) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	return orNil("put pool settings "+resource, writePoolSettings(ctx, s.db, resource, ps, at))
}

// writePoolSettings is PutPoolSettings on q.
func writePoolSettings(ctx context.Context, q sqlx.ExecerContext, resource string, ps pools.Settings, at time.Time) error {
	_, err := q.ExecContext(ctx, `REPLACE INTO quota_pool_settings (resource_name, shared_percent, dedicated_percent,
		buffer_percent, borrow_limit_percent, elasticity, reclaim_threshold_percent, reclaim_confirm_seconds,
		reclaim_dry_run, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		resource, ps.SharedPercent, ps.DedicatedPercent, ps.BufferPercent, ps.BorrowLimitPercent, string(ps.Elasticity),
		ps.ReclaimThresholdPercent, ps.ReclaimConfirmSeconds, ps.ReclaimDryRun, msOf(at))
	return err
}

// Lines reads a resource's business lines, by name. Errors:
// quota.ErrUnavailable.
func (s *Store) Lines(ctx context.Context, resource string) ([]pools.LineSpec, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	out, err := readLines(ctx, s.db, resource)
	return out, orNil("list lines "+resource, err)
}

// readLines is Lines on q.
func readLines(ctx context.Context, q sqlx.QueryerContext, resource string) ([]pools.LineSpec, error) {
	var rows []struct {
		Line      string `db:"line"`
		Tier      string `db:"tier"`
		Weight    int64  `db:"weight"`
		Dedicated int64  `db:"dedicated"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT line, tier, weight, dedicated FROM quota_line
		WHERE resource_name = ? ORDER BY line`, resource); err != nil {
		return nil, err
	}
	out := make([]pools.LineSpec, 0, len(rows))
	for _, r := range rows {
		out = append(out, pools.LineSpec{Name: r.Line, Tier: pools.Tier(r.Tier), Weight: r.Weight, Dedicated: r.Dedicated})
	}
	return out, nil
}

// PutLine creates or replaces one line and reports whether it was created.
// It does not check the line against the others (ChangePools does).
// Errors: quota.ErrUnavailable.
func (s *Store) PutLine(ctx context.Context, resource string, l pools.LineSpec, at time.Time) (bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	created, err := writeLine(ctx, s.db, resource, l, at)
	return created, orNil("put line "+resource, err)
}

// writeLine is PutLine on q.
func writeLine(ctx context.Context, q sqlx.ExtContext, resource string, l pools.LineSpec, at time.Time) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE quota_line SET tier = ?, weight = ?, dedicated = ?, updated_ms = ?
		WHERE resource_name = ? AND line = ?`, string(l.Tier), l.Weight, l.Dedicated, msOf(at), resource, l.Name)
	if err != nil {
		return false, err
	}
	var existing int
	if n, _ := res.RowsAffected(); n == 0 {
		// 0 rows: absent, or (MySQL without CLIENT_FOUND_ROWS) unchanged.
		if err := sqlx.GetContext(ctx, q, &existing, `SELECT COUNT(*) FROM quota_line WHERE resource_name = ? AND line = ?`,
			resource, l.Name); err != nil {
			return false, err
		}
		if existing == 0 {
			_, err = q.ExecContext(ctx, `INSERT INTO quota_line (resource_name, line, tier, weight, dedicated, created_ms, updated_ms)
				VALUES (?, ?, ?, ?, ?, ?, ?)`, resource, l.Name, string(l.Tier), l.Weight, l.Dedicated, msOf(at), msOf(at))
			return err == nil, err
		}
	}
	return false, nil
}

// DeleteLine removes a line. Errors: pools.ErrUnknownLine when there is no
// such line, quota.ErrUnavailable.
func (s *Store) DeleteLine(ctx context.Context, resource, line string) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `DELETE FROM quota_line WHERE resource_name = ? AND line = ?`, resource, line)
	if err != nil {
		return orNil("delete line "+resource, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete line %s/%s: %w", resource, line, pools.ErrUnknownLine)
	}
	return nil
}

// OpenLineSessions counts the open (USING) ledger rows of a line. A swept
// (LEAKED) row does not hold the line: its grant stays charged as it was,
// and a late finish of it trues up the period's balance (its pool counters
// only while the line exists). Errors: quota.ErrUnavailable.
func (s *Store) OpenLineSessions(ctx context.Context, resource, line string) (int64, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var n int64
	err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM quota_usage WHERE status = 'USING'
		AND resource_name = ? AND business_line = ?`, resource, line)
	return n, orNil("count line sessions "+resource, err)
}

type grantRow struct {
	ID        string        `db:"id"`
	Kind      string        `db:"kind"`
	Line      string        `db:"line"`
	Amount    int64         `db:"amount"`
	Effective int64         `db:"effective_ms"`
	Expires   int64         `db:"expires_ms"`
	Reason    string        `db:"reason"`
	Voided    sql.NullInt64 `db:"voided_ms"`
	Created   int64         `db:"created_ms"`
}

// Grants reads a resource's grants and buffer releases that expire after
// since (Unix ms), by expiry. Errors: quota.ErrUnavailable.
func (s *Store) Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	out, err := readGrants(ctx, s.db, resource, since)
	return out, orNil("list grants "+resource, err)
}

// readGrants is Grants on q.
func readGrants(ctx context.Context, q sqlx.QueryerContext, resource string, since int64) ([]pools.GrantRecord, error) {
	var rows []grantRow
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT id, kind, line, amount, effective_ms, expires_ms, reason, voided_ms, created_ms
		FROM quota_grant WHERE resource_name = ? AND expires_ms > ? ORDER BY expires_ms, id`, resource, since); err != nil {
		return nil, err
	}
	out := make([]pools.GrantRecord, 0, len(rows))
	for _, r := range rows {
		out = append(out, pools.GrantRecord{
			Grant: pools.Grant{ID: r.ID, Line: r.Line, Amount: r.Amount, EffectiveMs: r.Effective, ExpiresMs: r.Expires, Voided: r.Voided.Valid},
			Kind:  pools.GrantKind(r.Kind), Reason: r.Reason, CreatedMs: r.Created, VoidedMs: r.Voided.Int64,
		})
	}
	return out, nil
}

// InsertGrant records a grant or release. It does not check it against
// the others (ChangePools does). Errors: quota.ErrUnavailable.
func (s *Store) InsertGrant(ctx context.Context, resource string, g pools.GrantRecord) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	return orNil("insert grant "+resource, writeGrant(ctx, s.db, resource, g))
}

// writeGrant is InsertGrant on q.
func writeGrant(ctx context.Context, q sqlx.ExecerContext, resource string, g pools.GrantRecord) error {
	_, err := q.ExecContext(ctx, `INSERT INTO quota_grant (id, resource_name, kind, line, amount, effective_ms,
		expires_ms, reason, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		g.ID, resource, string(g.Kind), g.Line, g.Amount, g.EffectiveMs, g.ExpiresMs, g.Reason, g.CreatedMs)
	return err
}

// VoidGrant marks a grant voided at at (Unix ms). Errors:
// pools.ErrUnknownGrant when the resource has no such unvoided grant,
// quota.ErrUnavailable.
func (s *Store) VoidGrant(ctx context.Context, resource, id string, at int64) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `UPDATE quota_grant SET voided_ms = ? WHERE resource_name = ? AND id = ? AND voided_ms IS NULL`,
		at, resource, id)
	if err != nil {
		return orNil("void grant "+resource, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("void grant %s/%s: %w", resource, id, pools.ErrUnknownGrant)
	}
	return nil
}

// RecordPoolEvents appends events of a resource. An event with a Ref the
// resource's journal already has is not stored again (pools.Event.Ref:
// a spare-buffer move journalled by its apply and by a drain). Errors:
// quota.ErrUnavailable.
func (s *Store) RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error {
	if len(evs) == 0 {
		return nil
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	for _, e := range evs {
		err := insertPoolEvent(ctx, s.db, resource, e)
		if err != nil && !(e.Ref != "" && isDuplicateKey(err)) {
			return orNil("record pool event "+resource, err)
		}
	}
	return nil
}

// insertPoolEvent inserts one pool event on q (the database or a
// transaction).
func insertPoolEvent(ctx context.Context, q sqlx.ExecerContext, resource string, e pools.Event) error {
	var ref any
	if e.Ref != "" {
		ref = truncate(e.Ref, 100)
	}
	_, err := q.ExecContext(ctx, `INSERT INTO quota_pool_event (resource_name, at_ms, kind, line, amount, reason, ref)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, resource, e.AtMs, e.Kind, e.Line, e.Amount, truncate(e.Reason, 500), ref)
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// PoolEvents reads a resource's latest pool events, newest first, at most
// limit. Errors: quota.ErrUnavailable.
func (s *Store) PoolEvents(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []struct {
		ID     int64  `db:"id"`
		At     int64  `db:"at_ms"`
		Kind   string `db:"kind"`
		Line   string `db:"line"`
		Amount int64  `db:"amount"`
		Reason string `db:"reason"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT id, at_ms, kind, line, amount, reason FROM quota_pool_event
		WHERE resource_name = ? ORDER BY id DESC LIMIT ?`, resource, limit); err != nil {
		return nil, translate("list pool events "+resource, err)
	}
	out := make([]pools.PoolEvent, 0, len(rows))
	for _, r := range rows {
		out = append(out, pools.PoolEvent{ID: r.ID, Resource: resource, Event: pools.Event{AtMs: r.At, Kind: r.Kind, Line: r.Line, Amount: r.Amount, Reason: r.Reason}})
	}
	return out, nil
}

// Reclaims reads a resource's reclaims, newest first, at most limit.
// Errors: quota.ErrUnavailable.
func (s *Store) Reclaims(ctx context.Context, resource string, limit int) ([]pools.Reclaim, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []struct {
		ID     string `db:"id"`
		From   string `db:"from_line"`
		To     string `db:"to_line"`
		Amount int64  `db:"amount"`
		State  string `db:"state"`
		DryRun bool   `db:"dry_run"`
		Warned int64  `db:"warned_ms"`
		Update int64  `db:"updated_ms"`
		Reason string `db:"reason"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT id, from_line, to_line, amount, state, dry_run, warned_ms, updated_ms, reason
		FROM quota_reclaim WHERE resource_name = ? ORDER BY warned_ms DESC, id DESC LIMIT ?`, resource, limit); err != nil {
		return nil, translate("list reclaims "+resource, err)
	}
	out := make([]pools.Reclaim, 0, len(rows))
	for _, r := range rows {
		out = append(out, pools.Reclaim{ID: r.ID, From: r.From, To: r.To, Amount: r.Amount, State: pools.ReclaimState(r.State),
			DryRun: r.DryRun, WarnedMs: r.Warned, UpdateMs: r.Update, Reason: r.Reason})
	}
	return out, nil
}

// PutReclaim creates or updates a reclaim. Errors: quota.ErrUnavailable.
func (s *Store) PutReclaim(ctx context.Context, resource string, r pools.Reclaim) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	_, err := s.db.ExecContext(ctx, `REPLACE INTO quota_reclaim (id, resource_name, from_line, to_line, amount, state,
		dry_run, warned_ms, updated_ms, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, resource, r.From, r.To, r.Amount, string(r.State), r.DryRun, r.WarnedMs, r.UpdateMs, truncate(r.Reason, 500))
	return orNil("put reclaim "+resource, err)
}

// PoolTotals rebuilds, from the ledger, what the sessions of one period of
// a resource hold of each pool: FINISHED and CANCELLED rows pools.Settle
// of their draw (the unused part went back; a CANCELLED row charged
// nothing), summed per line; USING and LEAKED rows one
// by one with their whole draw (drawn_*) and session id, for the seed to
// check each against Redis (pools.Totals). Only rows of pools' sessions
// (something drawn) are read. Errors: quota.ErrUnavailable.
func (s *Store) PoolTotals(ctx context.Context, resource string, periodStart time.Time) (pools.Totals, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []struct {
		ID        string `db:"session_id"`
		Line      string `db:"business_line"`
		Status    string `db:"status"`
		Granted   int64  `db:"granted_amount"`
		Charged   int64  `db:"charged_amount"`
		Dedicated int64  `db:"drawn_dedicated"`
		Shared    int64  `db:"drawn_shared"`
		Buffer    int64  `db:"drawn_buffer"`
		Grant     int64  `db:"drawn_grant"`
		Grants    string `db:"drawn_grants"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT session_id, business_line, status, granted_amount, charged_amount,
		drawn_dedicated, drawn_shared, drawn_buffer, drawn_grant, drawn_grants
		FROM quota_usage WHERE resource_name = ? AND period_start_ms = ?
		AND (business_line <> '' OR drawn_grant > 0)`, resource, msOf(periodStart)); err != nil {
		return pools.Totals{}, translate("pool totals "+resource, err)
	}
	out := pools.Totals{Settled: map[string]pools.Drawn{}}
	for _, r := range rows {
		d := pools.Drawn{Dedicated: r.Dedicated, Shared: r.Shared, Buffer: r.Buffer, Grant: r.Grant, Grants: pools.ParseGrants(r.Grants)}
		if r.Line == "" {
			d.Base, d.Buffer = d.Buffer, 0
		}
		if r.Status != string(quota.StatusFinished) && r.Status != string(quota.StatusCancelled) {
			out.Open = append(out.Open, pools.OpenDraw{SessionID: r.ID, Line: r.Line, Drawn: d})
			continue
		}
		d = pools.Settle(d, r.Granted, r.Charged, r.Line != "")
		t := out.Settled[r.Line]
		t.Dedicated += d.Dedicated
		t.Shared += d.Shared
		t.Buffer += d.Buffer
		t.Grant += d.Grant
		t.Base += d.Base
		out.Settled[r.Line] = t
	}
	return out, nil
}

// orNil is translate for an err that may be nil.
func orNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return translate(op, err)
}

// PoolMoves rebuilds what the controller and operators moved in a
// resource's pools, for Redis after it lost them: the buffer lent to each
// line (and to the shared pool, line ""), as the RELEASE and LEND_* events
// less the RETURN events; each line's last watermark (WATERMARK_* events);
// and the reclaims. Events before the resource's last POOLS_CLEARED are
// not counted. Errors: quota.ErrUnavailable.
func (s *Store) PoolMoves(ctx context.Context, resource string) (pools.Moves, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var since int64
	if err := s.db.GetContext(ctx, &since, `SELECT COALESCE(MAX(id), 0) FROM quota_pool_event
		WHERE resource_name = ? AND kind = ?`, resource, pools.KindPoolsCleared); err != nil {
		return pools.Moves{}, translate("pool moves "+resource, err)
	}
	var lends []struct {
		Line   string `db:"line"`
		Kind   string `db:"kind"`
		Amount int64  `db:"amount"`
	}
	q, args, err := sqlx.In(`SELECT line, kind, COALESCE(SUM(amount), 0) AS amount FROM quota_pool_event
		WHERE resource_name = ? AND id > ? AND kind IN (?) GROUP BY line, kind`,
		resource, since, append(slices.Clone(pools.LendKinds), pools.ReturnKind))
	if err != nil {
		return pools.Moves{}, fmt.Errorf("pool moves %s: %w", resource, err)
	}
	if err := s.db.SelectContext(ctx, &lends, s.db.Rebind(q), args...); err != nil {
		return pools.Moves{}, translate("pool moves "+resource, err)
	}
	m := pools.Moves{Buffer: map[string]int64{}, Watermarks: map[string]int64{}}
	for _, l := range lends {
		if l.Kind == pools.ReturnKind {
			m.Buffer[l.Line] -= l.Amount
		} else {
			m.Buffer[l.Line] += l.Amount
		}
	}
	var wms []struct {
		Line   string `db:"line"`
		Amount int64  `db:"amount"`
	}
	q, args, err = sqlx.In(`SELECT e.line, e.amount FROM quota_pool_event e
		JOIN (SELECT line, MAX(id) AS id FROM quota_pool_event
			WHERE resource_name = ? AND id > ? AND kind IN (?) GROUP BY line) w ON e.id = w.id`,
		resource, since, pools.WatermarkKinds)
	if err != nil {
		return pools.Moves{}, fmt.Errorf("pool moves %s: %w", resource, err)
	}
	if err := s.db.SelectContext(ctx, &wms, s.db.Rebind(q), args...); err != nil {
		return pools.Moves{}, translate("pool moves "+resource, err)
	}
	for _, w := range wms {
		m.Watermarks[w.Line] = w.Amount
	}
	if m.Reclaims, err = s.Reclaims(ctx, resource, 1000); err != nil {
		return pools.Moves{}, err
	}
	return m, nil
}

// GrantsHeld rebuilds, from the ledger, what the sessions of a resource
// started at or after since (Unix ms) hold of each temporary grant:
// FINISHED and CANCELLED rows what stays charged (pools.Settle), summed
// per grant;
// USING and LEAKED rows one by one with their whole draw and session id
// (pools.GrantUse). Errors: quota.ErrUnavailable.
func (s *Store) GrantsHeld(ctx context.Context, resource string, since int64) (pools.GrantUse, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []usageRow
	if err := s.db.SelectContext(ctx, &rows, selectUsage+`WHERE resource_name = ? AND start_ms >= ? AND drawn_grant > 0`,
		resource, since); err != nil {
		return pools.GrantUse{}, translate("grants held "+resource, err)
	}
	out := pools.GrantUse{Settled: map[string]int64{}}
	for _, r := range rows {
		rec := r.record()
		d := rec.Drawn.Drawn()
		if rec.Status != quota.StatusFinished && rec.Status != quota.StatusCancelled {
			out.Open = append(out.Open, pools.OpenDraw{SessionID: rec.SessionID, Line: rec.BusinessLine, Drawn: d})
			continue
		}
		d = pools.Settle(d, rec.GrantedAmount, rec.ChargedAmount, rec.BusinessLine != "")
		for _, g := range d.Grants {
			out.Settled[g.ID] += g.Amount
		}
	}
	return out, nil
}

// LineReserved sums, per business line, the grants of the open (USING)
// sessions of one period of a resource: what its lines hold reserved now.
// Errors: quota.ErrUnavailable.
func (s *Store) LineReserved(ctx context.Context, resource string, periodStart time.Time) (map[string]int64, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []struct {
		Line     string `db:"business_line"`
		Reserved int64  `db:"reserved"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT business_line, COALESCE(SUM(charged_amount), 0) AS reserved
		FROM quota_usage WHERE resource_name = ? AND period_start_ms = ? AND status = 'USING' AND business_line <> ''
		GROUP BY business_line`, resource, msOf(periodStart)); err != nil {
		return nil, translate("line reserved "+resource, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Line] = r.Reserved
	}
	return out, nil
}
