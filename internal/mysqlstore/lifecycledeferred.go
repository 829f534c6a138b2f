package mysqlstore

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// This file is the rollup's list of rows kept raw below the watermark
// (migration 00012_rollup_deferred): a LEAKED or CANCELLED row settled less
// than QC_LEDGER_ROLLUP_AFTER ago may still change, so the rollup passes it
// without summing it and lists it in quota_usage_rollup_deferred; readers
// of the rolled-up range read the listed rows raw (deferredUsageSQL,
// periodTotalsSQL), and the last step of a later visit sums each once it
// can no longer change (settleDeferred). Before, such a row stopped the
// rollup, and the watermark of a resource with leaks stayed a day behind.
// A row written late below the watermark (insertLate, lateinsert.go: a
// fail-open session recorded by reconciliation) is listed too, USING or
// settled, and handled the same way.

// settledLongAgo holds for a row that can no longer change, of a range
// without USING rows (argument settled-before ms): FINISHED (a finish never
// changes a finished row), or LEAKED or CANCELLED and settled before the
// bound. Its complement among such rows is deferSQL's.
const settledLongAgo = `(status = 'FINISHED' OR end_ms < ?)`

// deferSQL, after the dialect's insertIgnore, lists the rows of a range
// that the rollup leaves out of its sums: not FINISHED, and settled at or
// after the bound (or with no end recorded). Arguments resource, from ms,
// to ms, settled-before ms.
const deferSQL = ` INTO quota_usage_rollup_deferred (resource_name, start_ms, period_start_ms, id)
	SELECT resource_name, start_ms, period_start_ms, id FROM quota_usage
	WHERE resource_name = ? AND start_ms >= ? AND start_ms < ?
	AND status <> 'FINISHED' AND (end_ms IS NULL OR end_ms >= ?)`

// notDeferred keeps the rows not listed (argument resource): retention
// deletes no listed row.
const notDeferred = `id NOT IN (SELECT id FROM quota_usage_rollup_deferred WHERE resource_name = ?)`

// settleableCountSQL counts the listed rows of a resource that started
// before a bound and can no longer change (arguments resource, bound ms,
// settled-before ms): what settleDeferred would sum.
const settleableCountSQL = `SELECT COUNT(*) FROM quota_usage_rollup_deferred d
	JOIN quota_usage q ON q.id = d.id AND q.start_ms = d.start_ms
	WHERE d.resource_name = ? AND q.start_ms < ? AND q.status <> 'USING' AND (q.status = 'FINISHED' OR q.end_ms < ?)`

// deferredChunk bounds the ids of one IN list of settleDeferred.
const deferredChunk = 500

// settleDeferred sums the listed rows of resource that can no longer change
// into the rollups and takes them off the list, with the entries of rows
// that no longer start where they were listed (revived by a retried apply:
// read raw above the watermark w, or listed again at their new start), or
// are gone; it returns the rows summed. An entry counts for readers only
// while its row starts where it was listed, so a row is never counted
// through two entries. The caller
// holds the resource's lifecycle row lock, under which alone the list
// changes.
func (s *Store) settleDeferred(ctx context.Context, tx *sqlx.Tx, resource string, w, settled int64) (int64, error) {
	var rows []struct {
		ID     int64          `db:"id"`
		Listed int64          `db:"listed"`
		Start  sql.NullInt64  `db:"start_ms"`
		Status sql.NullString `db:"status"`
		End    sql.NullInt64  `db:"end_ms"`
	}
	if err := tx.SelectContext(ctx, &rows, `SELECT d.id, d.start_ms AS listed, q.start_ms, q.status, q.end_ms
		FROM quota_usage_rollup_deferred d LEFT JOIN quota_usage q ON q.id = d.id
		WHERE d.resource_name = ?`, resource); err != nil {
		return 0, err
	}
	var sum, drop []int64
	var stale []struct{ start, id int64 } // entries to drop one by one: their id has an entry kept
	kept := map[int64]bool{}
	for _, r := range rows {
		switch {
		case !r.Start.Valid || r.Start.Int64 != r.Listed || r.Start.Int64 >= w:
		case r.Status.String == "FINISHED" || r.Status.String != "USING" && r.End.Valid && r.End.Int64 < settled:
			sum = append(sum, r.ID)
		default:
			kept[r.ID] = true
		}
	}
	for _, r := range rows {
		switch {
		case kept[r.ID] && r.Start.Valid && r.Start.Int64 == r.Listed:
		case kept[r.ID]:
			stale = append(stale, struct{ start, id int64 }{r.Listed, r.ID})
		default:
			drop = append(drop, r.ID)
		}
	}
	for _, e := range stale {
		if _, err := tx.ExecContext(ctx, `DELETE FROM quota_usage_rollup_deferred
			WHERE resource_name = ? AND start_ms = ? AND id = ?`, resource, e.start, e.id); err != nil {
			return 0, err
		}
	}
	for i := 0; i < len(sum); i += deferredChunk {
		q, args, err := sqlx.In(rollupSumsWhere+`WHERE id IN (?)`+rollupGroupBy, sum[i:min(i+deferredChunk, len(sum))])
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(q+s.dialect.lifecycle.upsertSums), args...); err != nil {
			return 0, err
		}
	}
	for i := 0; i < len(drop); i += deferredChunk {
		q, args, err := sqlx.In(`DELETE FROM quota_usage_rollup_deferred WHERE resource_name = ? AND id IN (?)`,
			resource, drop[i:min(i+deferredChunk, len(drop))])
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(q), args...); err != nil {
			return 0, err
		}
	}
	return int64(len(sum)), nil
}
