package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// ChangePools makes one change of a resource's pools in one transaction
// that first locks the resource's policy row (MySQL: SELECT … FOR UPDATE;
// SQLite has one connection, so its transactions take turns anyway): it
// reads the pools' State (grants and releases expiring after since, Unix
// ms; State.OpenSessions counts a line's open sessions in the same
// transaction), asks decide for the change, writes it at at (with its
// Events), then calls then (nil:
// none) before it commits. Two changes of one resource thus take turns,
// and each is checked against what the other wrote: lines that together
// pass the dedicated pool, or grants that together pass 2^53-1, cannot
// both be stored (issue 21). then runs under the lock, so that what it
// writes elsewhere (the layout in Redis) lands in the order of the
// commits; when then fails nothing is stored here (on MySQL; on SQLite,
// whose one connection the transaction holds, then runs after the commit,
// and a caller keeps changes of one resource in turn itself). created reports that
// a PutLine created its line.
//
// Errors: decide's and then's errors as they are (nothing stored);
// quota.ErrResourceNotFound when the resource has no policy;
// pools.ErrUnknownLine when a DeleteLine names no line; pools.ErrUnknownGrant
// when a VoidGrant names none unvoided; quota.ErrUnavailable.
func (s *Store) ChangePools(ctx context.Context, resource string, since int64, at time.Time,
	decide func(pools.State) (pools.Change, error), then func() error) (created bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	defer s.sqliteTurn(resource)()
	op := "change pools " + resource
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return false, translate(op, err)
	}
	defer func() {
		if err != nil {
			if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	var limit int64
	err = tx.GetContext(ctx, &limit, `SELECT total_limit FROM quota_policy WHERE resource_name = ?`+
		s.dialect.lifecycle.lockRow, resource)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("%s: %w", op, quota.ErrResourceNotFound)
	}
	if err != nil {
		return false, translate(op, err)
	}
	st := pools.State{Limit: limit}
	if st.Settings, _, err = readPoolSettings(ctx, tx, resource); err != nil {
		return false, translate(op, err)
	}
	if st.Lines, err = readLines(ctx, tx, resource); err != nil {
		return false, translate(op, err)
	}
	if st.Grants, err = readGrants(ctx, tx, resource, since); err != nil {
		return false, translate(op, err)
	}
	st.OpenSessions = func(line string) (int64, error) {
		var n int64
		err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM quota_usage WHERE status = 'USING'
			AND resource_name = ? AND business_line = ?`, resource, line)
		return n, orNil("count line sessions "+resource, err)
	}
	ch, err := decide(st)
	if err != nil {
		return false, err
	}
	if created, err = s.writeChange(ctx, tx, resource, ch, at); err != nil {
		return false, err
	}
	for _, e := range ch.Events {
		if err = insertPoolEvent(ctx, tx, resource, e); err != nil {
			return false, translate(op, err)
		}
	}
	// SQLite has one connection, which this transaction holds: then (which
	// may read the database) runs after the commit there, in the turn the
	// caller keeps itself (internal/admin's per-resource lock).
	sqlite := s.dialect.name != dialectMySQL.name
	if then != nil && !sqlite {
		if err = then(); err != nil {
			return false, err
		}
	}
	if err = tx.Commit(); err != nil {
		return false, translate(op, err)
	}
	if then != nil && sqlite {
		return created, then()
	}
	return created, nil
}

// writeChange writes ch in tx.
func (s *Store) writeChange(ctx context.Context, tx *sqlx.Tx, resource string, ch pools.Change, at time.Time) (bool, error) {
	op := "change pools " + resource
	switch {
	case ch.PutLine != nil:
		created, err := writeLine(ctx, tx, resource, *ch.PutLine, at)
		return created, orNil(op, err)
	case ch.DeleteLine != "":
		res, err := tx.ExecContext(ctx, `DELETE FROM quota_line WHERE resource_name = ? AND line = ?`, resource, ch.DeleteLine)
		if err != nil {
			return false, translate(op, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return false, fmt.Errorf("delete line %s/%s: %w", resource, ch.DeleteLine, pools.ErrUnknownLine)
		}
		return false, nil
	case ch.Settings != nil:
		return false, orNil(op, writePoolSettings(ctx, tx, resource, *ch.Settings, at))
	case ch.Grant != nil:
		return false, orNil(op, writeGrant(ctx, tx, resource, *ch.Grant))
	case ch.VoidGrant != "":
		res, err := tx.ExecContext(ctx, `UPDATE quota_grant SET voided_ms = ? WHERE resource_name = ? AND id = ? AND voided_ms IS NULL`,
			at.UnixMilli(), resource, ch.VoidGrant)
		if err != nil {
			return false, translate(op, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return false, fmt.Errorf("void grant %s/%s: %w", resource, ch.VoidGrant, pools.ErrUnknownGrant)
		}
		return false, nil
	}
	return false, fmt.Errorf("%s: an empty change", op)
}
