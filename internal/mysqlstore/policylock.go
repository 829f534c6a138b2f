package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// UpdatePolicyLocked updates the stored policy of p.ResourceName as
// PutPolicy does (times, and an update whose settings are the stored ones
// writes nothing), in one transaction that first locks the policy row,
// as ChangePools does (MySQL: SELECT … FOR UPDATE; SQLite: its one
// connection), so that a limit change and a change of the resource's
// pools take turns. When the settings differ, check is asked with the
// pools read under the lock (State.Limit is the stored limit; grants and
// releases expiring after since, Unix ms) before the write; its error is
// returned as it is and nothing is written. With p.Pools the pool
// settings are checked (State.Settings is then p.Pools) and written in the
// same transaction: the policy and its settings are stored together or
// not at all (settings that are all that changed leave the policy's row,
// and the stored policy is returned). found false: the resource has no policy, nothing was
// written (the caller creates it).
//
// Errors: check's; one wrapping quota.ErrUnavailable.
func (s *Store) UpdatePolicyLocked(ctx context.Context, p quota.Policy, since int64,
	check func(pools.State) error) (stored quota.Policy, found bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = time.Now()
	}
	p.UpdatedAt = timeOf(msOf(p.UpdatedAt))
	p.FailMode = p.FailMode.OrDefault()
	op := "put policy " + p.ResourceName
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return quota.Policy{}, false, translate(op, err)
	}
	defer func() {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) && err == nil {
			err = translate(op, rerr)
		}
	}()
	var r policyRow
	err = tx.GetContext(ctx, &r, `SELECT `+policyColumns+` FROM quota_policy WHERE resource_name = ?`+
		s.dialect.lifecycle.lockRow, p.ResourceName)
	if errors.Is(err, sql.ErrNoRows) {
		return quota.Policy{}, false, nil
	}
	if err != nil {
		return quota.Policy{}, false, translate(op, err)
	}
	cur := r.policy()
	if cur.SameSettings(p) && p.Pools == nil {
		return cur, true, nil
	}
	st := pools.State{Limit: r.TotalLimit}
	if st.Settings, _, err = readPoolSettings(ctx, tx, p.ResourceName); err != nil {
		return quota.Policy{}, true, translate(op, err)
	}
	if p.Pools != nil {
		if cur.SameSettings(p) && st.Settings == *p.Pools {
			return cur, true, nil
		}
		st.Settings = *p.Pools // the lines are checked against the new settings
	}
	if st.Lines, err = readLines(ctx, tx, p.ResourceName); err != nil {
		return quota.Policy{}, true, translate(op, err)
	}
	if st.Grants, err = readGrants(ctx, tx, p.ResourceName, since); err != nil {
		return quota.Policy{}, true, translate(op, err)
	}
	if err = check(st); err != nil {
		return quota.Policy{}, true, err
	}
	same := cur.SameSettings(p) // only the pool settings change: the policy row stays
	if !same {
		if _, err = tx.ExecContext(ctx, `UPDATE quota_policy SET quota_type = ?, total_limit = ?,
			reset_cron = ?, timezone = ?, leak_threshold_seconds = ?, fail_mode = ?, updated_ms = ?
			WHERE resource_name = ?`,
			string(p.QuotaType), p.TotalLimit, p.ResetCron, p.Timezone, p.LeakThresholdSeconds,
			string(p.FailMode), msOf(p.UpdatedAt), p.ResourceName); err != nil {
			return quota.Policy{}, true, translate(op, err)
		}
	}
	if p.Pools != nil {
		if err = writePoolSettings(ctx, tx, p.ResourceName, *p.Pools, p.UpdatedAt); err != nil {
			return quota.Policy{}, true, translate(op, err)
		}
	}
	if err = tx.Commit(); err != nil {
		return quota.Policy{}, true, translate(op, err)
	}
	if same {
		return cur, true, nil
	}
	p.CreatedAt, p.Pools = timeOf(r.CreatedMs), nil
	return p, true, nil
}

// ReadPoolsLocked reads a resource's limit, pool settings and lines in a
// transaction that first locks its policy row, the lock every change of
// its pools and limit takes (ChangePools, UpdatePolicyLocked), and writes
// nothing: a read that waits for a change in its turn to commit (the
// quota Service checks with it that the limit and layout it wrote to
// Redis are still the stored ones). State.Grants is left empty.
// found false: the resource has no policy. Errors: quota.ErrUnavailable.
func (s *Store) ReadPoolsLocked(ctx context.Context, resource string) (st pools.State, found bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	op := "read pools " + resource
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return st, false, translate(op, err)
	}
	defer func() { _ = tx.Rollback() }() // read only: nothing to keep
	err = tx.GetContext(ctx, &st.Limit, `SELECT total_limit FROM quota_policy WHERE resource_name = ?`+
		s.dialect.lifecycle.lockRow, resource)
	if errors.Is(err, sql.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, translate(op, err)
	}
	if st.Settings, _, err = readPoolSettings(ctx, tx, resource); err != nil {
		return st, true, translate(op, err)
	}
	if st.Lines, err = readLines(ctx, tx, resource); err != nil {
		return st, true, translate(op, err)
	}
	return st, true, nil
}
