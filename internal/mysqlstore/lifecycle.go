package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/lifecycle"
)

// This file is the ledger side of the lifecycle (internal/lifecycle,
// migration 00009_usage_rollup): rows are rolled up, oldest first, into
// quota_usage_rollup behind a per-resource watermark (quota_usage_lifecycle
// rolled_to_ms), and rolled-up rows are deleted in bounded batches. Every
// range below is a range of idx_quota_usage_start (resource_name, start_ms).

// lifecycleDialect holds the SQL of the lifecycle that differs per dialect.
type lifecycleDialect struct {
	// ensureRow inserts a resource's lifecycle row (watermark 0) unless it
	// exists; argument resource_name.
	ensureRow string
	// lockRow ends the watermark read: the row lock that makes two
	// instances take turns (MySQL; SQLite has one writer and one
	// connection).
	lockRow string
	// lockRange ends the blocker check: a shared lock on the range, so that
	// no row in it changes or appears before the transaction ends.
	lockRange string
	// upsertSums ends the INSERT … SELECT of the sums: add to existing
	// groups.
	upsertSums string
	// insertIgnore starts an INSERT that skips rows whose key exists.
	insertIgnore string
}

var (
	lifecycleMySQL = lifecycleDialect{
		ensureRow: `INSERT INTO quota_usage_lifecycle (resource_name) VALUES (?)
			ON DUPLICATE KEY UPDATE resource_name = resource_name`,
		lockRow:   ` FOR UPDATE`,
		lockRange: ` LOCK IN SHARE MODE`,
		upsertSums: ` ON DUPLICATE KEY UPDATE sessions = sessions + VALUES(sessions),
			leaked = leaked + VALUES(leaked), granted = granted + VALUES(granted),
			charged = charged + VALUES(charged), refunded = refunded + VALUES(refunded),
			overage = overage + VALUES(overage)`,
		insertIgnore: `INSERT IGNORE`,
	}
	lifecycleSQLite = lifecycleDialect{
		ensureRow: `INSERT INTO quota_usage_lifecycle (resource_name) VALUES (?) ON CONFLICT (resource_name) DO NOTHING`,
		upsertSums: ` ON CONFLICT (resource_name, hour_ms, period_start_ms, client_id, business_line) DO UPDATE SET
			sessions = sessions + excluded.sessions, leaked = leaked + excluded.leaked,
			granted = granted + excluded.granted, charged = charged + excluded.charged,
			refunded = refunded + excluded.refunded, overage = overage + excluded.overage`,
		insertIgnore: `INSERT OR IGNORE`,
	}
)

// rolledToSQL reads a resource's watermark (0 before its first rollup).
const rolledToSQL = `SELECT COALESCE(MAX(rolled_to_ms), 0) FROM quota_usage_lifecycle WHERE resource_name = ?`

// rollupSumsWhere sums ledger rows per UTC hour of the start, period,
// client and line into quota_usage_rollup; append the WHERE clause (and
// the dialect's upsertSums). The rows are settled and can no longer change
// (the caller checked), so charged_amount is what each was charged.
const rollupSumsWhere = `INSERT INTO quota_usage_rollup
	(resource_name, hour_ms, period_start_ms, client_id, business_line,
	 sessions, leaked, granted, charged, refunded, overage)
	SELECT resource_name, start_ms - start_ms % 3600000, period_start_ms, client_id, business_line,
		COUNT(*), SUM(CASE WHEN status = 'LEAKED' OR leak_recovered = 1 THEN 1 ELSE 0 END),
		SUM(granted_amount), SUM(charged_amount), SUM(refunded_amount), SUM(overage_amount)
	FROM quota_usage `

// rollupGroupBy ends rollupSumsWhere's statement (before upsertSums).
const rollupGroupBy = `
	GROUP BY resource_name, start_ms - start_ms % 3600000, period_start_ms, client_id, business_line`

// rollupSums sums the rows of a resource that started in [?, ?) and can no
// longer change (arguments resource, from ms, to ms, settled-before ms):
// the range holds no USING row (the caller checked), and a LEAKED or
// CANCELLED row settled at or after the bound is left out (deferSQL lists
// it instead).
const rollupSums = rollupSumsWhere + `WHERE resource_name = ? AND start_ms >= ? AND start_ms < ?
	AND ` + settledLongAgo + rollupGroupBy

// blockerSQL finds the first USING row of a range (arguments resource,
// from ms, to ms): an open session's row changes when it is finished, so
// the rollup stops before it. A LEAKED or CANCELLED row settled recently
// may still change too (a late finish trues a leaked row up, a retried
// apply revives a cancelled one) but does not stop the rollup: it is left
// out of the sums and listed in quota_usage_rollup_deferred (deferSQL,
// lifecycledeferred.go), read raw until it can no longer change.
const blockerSQL = `SELECT MIN(start_ms) FROM quota_usage
	WHERE resource_name = ? AND start_ms >= ? AND start_ms < ? AND status = 'USING'`

// RollupStep implements lifecycle.Store: see there. The watermark is read
// under its row's lock (MySQL: SELECT … FOR UPDATE), the range is checked
// for USING rows under a shared lock, and the sums, the rows left out of
// them (listed in quota_usage_rollup_deferred) and the new watermark commit
// together: a step either adds its rows once or not at all, whichever
// instance runs it and however often. The last step of a visit (done or
// blocked) also sums the listed rows that can no longer change
// (settleDeferred).
func (s *Store) RollupStep(ctx context.Context, resource string, target, settledBefore time.Time, batch int) (lifecycle.RollupStep, error) {
	var out lifecycle.RollupStep
	err := s.lifecycleTx(ctx, "rollup "+resource, func(tx *sqlx.Tx) error {
		w, err := s.lockWatermark(ctx, tx, resource)
		if err != nil {
			return err
		}
		out.RolledTo = timeOf(w)
		end, settled := msOf(target), msOf(settledBefore)
		if w < end {
			if w, err = s.rollupRange(ctx, tx, resource, w, end, settled, batch, &out); err != nil {
				return err
			}
		}
		out.RolledTo, out.Done = timeOf(w), w >= end
		if !out.Done && !out.Blocked {
			return nil
		}
		n, err := s.settleDeferred(ctx, tx, resource, w, settled)
		out.Rows += n
		return err
	})
	return out, err
}

// rollupRange rolls up the rows of resource from the watermark w to the
// next batch bound (or the first USING row, out.Blocked) and returns the
// new watermark; out.Rows counts the rows summed.
func (s *Store) rollupRange(ctx context.Context, tx *sqlx.Tx, resource string, w, end, settled int64, batch int, out *lifecycle.RollupStep) (int64, error) {
	u, err := rangeBound(ctx, tx, resource, w, end, batch)
	if err != nil {
		return w, err
	}
	var blocker sql.NullInt64
	if err := tx.GetContext(ctx, &blocker, blockerSQL+s.dialect.lifecycle.lockRange, resource, w, u); err != nil {
		return w, err
	}
	if blocker.Valid {
		u, out.Blocked = blocker.Int64, true
	}
	if u <= w {
		return w, nil
	}
	if err := tx.GetContext(ctx, &out.Rows, `SELECT COUNT(*) FROM quota_usage
		WHERE resource_name = ? AND start_ms >= ? AND start_ms < ? AND `+settledLongAgo, resource, w, u, settled); err != nil {
		return w, err
	}
	if _, err := tx.ExecContext(ctx, rollupSums+s.dialect.lifecycle.upsertSums, resource, w, u, settled); err != nil {
		return w, err
	}
	if _, err := tx.ExecContext(ctx, s.dialect.lifecycle.insertIgnore+deferSQL, resource, w, u, settled); err != nil {
		return w, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE quota_usage_lifecycle SET rolled_to_ms = ?, updated_ms = ?
		WHERE resource_name = ?`, u, time.Now().UnixMilli(), resource); err != nil {
		return w, err
	}
	return u, nil
}

// DeleteStep implements lifecycle.Store: see there. The bound is the
// earlier of before and the watermark, read in the same transaction; rows
// below the watermark are settled and rolled up, so no reader needs them,
// except those listed in quota_usage_rollup_deferred (read raw: kept).
func (s *Store) DeleteStep(ctx context.Context, resource string, before time.Time, batch int) (lifecycle.DeleteStep, error) {
	var out lifecycle.DeleteStep
	err := s.lifecycleTx(ctx, "delete "+resource, func(tx *sqlx.Tx) error {
		var w int64
		if err := tx.GetContext(ctx, &w, rolledToSQL, resource); err != nil {
			return err
		}
		end := min(w, msOf(before))
		u, err := rangeBound(ctx, tx, resource, 0, end, batch)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM quota_usage
			WHERE resource_name = ? AND start_ms < ? AND status <> 'USING' AND `+notDeferred, resource, u, resource)
		if err != nil {
			return err
		}
		out.Rows, err = res.RowsAffected()
		out.Done = u >= end
		return err
	})
	return out, err
}

// Preview implements lifecycle.Store: see there.
func (s *Store) Preview(ctx context.Context, resource string, target, settledBefore, deleteBefore time.Time) (lifecycle.Preview, error) {
	var out lifecycle.Preview
	err := s.lifecycleTx(ctx, "preview "+resource, func(tx *sqlx.Tx) error {
		var w int64
		if err := tx.GetContext(ctx, &w, rolledToSQL, resource); err != nil {
			return err
		}
		u, settled := max(w, msOf(target)), msOf(settledBefore)
		var blocker sql.NullInt64
		if err := tx.GetContext(ctx, &blocker, blockerSQL, resource, w, u); err != nil {
			return err
		}
		if blocker.Valid {
			u, out.Blocked = blocker.Int64, true
		}
		out.RolledTo, out.RollupTo = timeOf(w), timeOf(u)
		count := `SELECT COUNT(*) FROM quota_usage WHERE resource_name = ? AND start_ms >= ? AND start_ms < ? AND `
		var listed int64
		if err := tx.GetContext(ctx, &out.RowsToRollUp, count+settledLongAgo, resource, w, u, settled); err != nil {
			return err
		}
		if err := tx.GetContext(ctx, &listed, settleableCountSQL, resource, u, settled); err != nil {
			return err
		}
		out.RowsToRollUp += listed
		if deleteBefore.IsZero() {
			return nil
		}
		// Rows below the watermark then: rolled up before (not listed) or
		// by this pass (settled long ago), and listed rows it sums.
		d := min(u, msOf(deleteBefore))
		if err := tx.GetContext(ctx, &out.RowsToDelete, count+`status <> 'USING'
			AND (start_ms < ? OR `+settledLongAgo+`) AND `+notDeferred, resource, 0, d, w, settled, resource); err != nil {
			return err
		}
		if err := tx.GetContext(ctx, &listed, settleableCountSQL, resource, d, settled); err != nil {
			return err
		}
		out.RowsToDelete += listed
		return nil
	})
	return out, err
}

// lifecycleTimeout bounds one lifecycle transaction: a step of
// QC_LEDGER_ROLLUP_BATCH rows takes far longer than one ledger query
// (QC_MYSQL_TIMEOUT), and a step cut short commits nothing.
const lifecycleTimeout = time.Minute

// lifecycleTx runs fn in a transaction (rolled back when fn fails) and
// translates its error.
func (s *Store) lifecycleTx(ctx context.Context, what string, fn func(tx *sqlx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, max(lifecycleTimeout, s.timeout))
	defer cancel()
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return translate("ledger lifecycle "+what, err)
	}
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			err = errors.Join(err, rerr)
		}
		return translate("ledger lifecycle "+what, errors.Join(err, ctx.Err()))
	}
	if err := tx.Commit(); err != nil {
		return translate("ledger lifecycle "+what, err)
	}
	return nil
}

// lockWatermark reads resource's watermark (ms) holding its row's lock,
// creating the row first.
func (s *Store) lockWatermark(ctx context.Context, tx *sqlx.Tx, resource string) (int64, error) {
	if _, err := tx.ExecContext(ctx, s.dialect.lifecycle.ensureRow, resource); err != nil {
		return 0, fmt.Errorf("lifecycle row: %w", err)
	}
	var w int64
	err := tx.GetContext(ctx, &w, `SELECT rolled_to_ms FROM quota_usage_lifecycle WHERE resource_name = ?`+
		s.dialect.lifecycle.lockRow, resource)
	return w, err
}

// rangeBound returns u in (from, to] such that [from, u) holds at most
// about batch rows of resource: the start of the row batch places after
// from (to when fewer remain). A millisecond holding more than batch rows
// is taken whole (u = its start + 1), so every step makes progress.
func rangeBound(ctx context.Context, tx *sqlx.Tx, resource string, from, to int64, batch int) (int64, error) {
	var u int64
	err := tx.GetContext(ctx, &u, `SELECT start_ms FROM quota_usage
		WHERE resource_name = ? AND start_ms >= ? AND start_ms < ? ORDER BY start_ms LIMIT 1 OFFSET ?`,
		resource, from, to, batch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return to, nil
	case err != nil:
		return 0, err
	}
	var first int64
	if err := tx.GetContext(ctx, &first, `SELECT MIN(start_ms) FROM quota_usage
		WHERE resource_name = ? AND start_ms >= ?`, resource, from); err != nil {
		return 0, err
	}
	if u == first {
		u++
	}
	return u, nil
}

// candidatesSQL reads a page of the resources with ledger rows that started
// before a bound: per resource the first and last such start, its
// watermark (0 before its first rollup) and whether it has rows listed in
// quota_usage_rollup_deferred (to sum once they can no longer change). The inner GROUP BY is a loose scan
// of idx_quota_usage_start (MySQL "Using index for group-by"): one index
// dive per resource with rows, none per policy without. Arguments: after
// (resource name), bound ms, limit.
const candidatesSQL = `SELECT g.resource_name, g.first_ms, g.last_ms, COALESCE(l.rolled_to_ms, 0) AS rolled_to_ms,
		EXISTS (SELECT 1 FROM quota_usage_rollup_deferred d WHERE d.resource_name = g.resource_name) AS deferred
	FROM (SELECT resource_name, MIN(start_ms) AS first_ms, MAX(start_ms) AS last_ms FROM quota_usage
		WHERE resource_name > ? AND start_ms < ? GROUP BY resource_name ORDER BY resource_name LIMIT ?) g
	LEFT JOIN quota_usage_lifecycle l ON l.resource_name = g.resource_name
	ORDER BY g.resource_name`

// Candidates implements lifecycle.Store: see there.
func (s *Store) Candidates(ctx context.Context, rollupBefore, deleteBefore time.Time, after string, limit int) (lifecycle.Candidates, error) {
	var out lifecycle.Candidates
	bound := msOf(rollupBefore)
	if !deleteBefore.IsZero() {
		bound = max(bound, msOf(deleteBefore))
	}
	var rows []struct {
		Resource string `db:"resource_name"`
		First    int64  `db:"first_ms"`
		Last     int64  `db:"last_ms"`
		RolledTo int64  `db:"rolled_to_ms"`
		Deferred bool   `db:"deferred"`
	}
	qctx, cancel := context.WithTimeout(ctx, max(lifecycleTimeout, s.timeout))
	defer cancel()
	if err := s.db.SelectContext(qctx, &rows, candidatesSQL, after, bound, max(limit, 1)); err != nil {
		return out, translate("ledger lifecycle candidates", err)
	}
	for _, r := range rows {
		roll := r.Last >= r.RolledTo && r.RolledTo < msOf(rollupBefore) || r.Deferred
		del := !deleteBefore.IsZero() && r.First < min(r.RolledTo, msOf(deleteBefore))
		if roll || del {
			out.Resources = append(out.Resources, r.Resource)
		}
	}
	if len(rows) == max(limit, 1) {
		out.Next = rows[len(rows)-1].Resource
	}
	return out, nil
}
