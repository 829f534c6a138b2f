package mysqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/quotacenter/quota-center/internal/quota"
)

// InsertLateSession writes the USING row of rec, as InsertSession does,
// for a session that may have started long ago (an apply's own row is
// written within its insert deadline, seconds, of its start; a fail-open
// session recorded by reconciliation after an outage, hours), in
// one transaction that holds the resource's lifecycle row lock (as every
// rollup step does, lifecycle.go): when the row starts below the
// watermark, which no rollup step can move meanwhile, it is listed in
// quota_usage_rollup_deferred, so that the readers of the rolled-up range
// read it raw (usage, period totals) and a later pass sums it once it can
// no longer change, exactly once (an unlisted row below the watermark
// would be in no reader's range, and its grant lost from a rebuild's
// totals). A row at or above the watermark is rolled up by a later step
// as any other. It costs three statements and the lock, not a share of a
// group commit. Errors: as InsertSession's.
func (s *Store) InsertLateSession(ctx context.Context, rec quota.UsageRecord) (err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return insertError(rec.SessionID, err)
	}
	defer func() {
		if err != nil {
			if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	w, err := s.lockWatermark(ctx, tx, rec.ResourceName)
	if err != nil {
		return insertError(rec.SessionID, err)
	}
	res, err := tx.ExecContext(ctx, insertSQL(1), insertArgs([]quota.UsageRecord{rec})...)
	if err != nil {
		return insertError(rec.SessionID, err)
	}
	if start := msOf(rec.StartTime); start < w {
		id, err := res.LastInsertId()
		if err != nil {
			return insertError(rec.SessionID, err)
		}
		if _, err := tx.ExecContext(ctx, s.dialect.lifecycle.insertIgnore+` INTO quota_usage_rollup_deferred
			(resource_name, start_ms, period_start_ms, id) VALUES (?, ?, ?, ?)`,
			rec.ResourceName, start, msOf(rec.PeriodStart), id); err != nil {
			return insertError(rec.SessionID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return insertError(rec.SessionID, err)
	}
	return nil
}
