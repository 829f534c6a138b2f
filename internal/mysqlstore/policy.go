package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

const policyColumns = `resource_name, quota_type, total_limit, reset_cron, timezone,
	leak_threshold_seconds, fail_mode, created_ms, updated_ms, period_anchor_ms`

type policyRow struct {
	ResourceName         string `db:"resource_name"`
	QuotaType            string `db:"quota_type"`
	TotalLimit           int64  `db:"total_limit"`
	ResetCron            string `db:"reset_cron"`
	Timezone             string `db:"timezone"`
	LeakThresholdSeconds int64  `db:"leak_threshold_seconds"`
	FailMode             string `db:"fail_mode"`
	CreatedMs            int64  `db:"created_ms"`
	UpdatedMs            int64  `db:"updated_ms"`
	PeriodAnchorMs       int64  `db:"period_anchor_ms"`
}

func (r policyRow) policy() quota.Policy {
	p := quota.Policy{
		ResourceName:         r.ResourceName,
		QuotaType:            quota.QuotaType(r.QuotaType),
		TotalLimit:           r.TotalLimit,
		ResetCron:            r.ResetCron,
		Timezone:             r.Timezone,
		LeakThresholdSeconds: r.LeakThresholdSeconds,
		FailMode:             quota.FailMode(r.FailMode),
		CreatedAt:            timeOf(r.CreatedMs),
		UpdatedAt:            timeOf(r.UpdatedMs),
	}
	if r.PeriodAnchorMs > 0 {
		p.ResetAt = timeOf(r.PeriodAnchorMs)
	}
	return p
}

// GetPolicy reads the policy of resource. Times are UTC, at millisecond
// precision. Errors: one wrapping quota.ErrResourceNotFound when there is no
// such policy, quota.ErrUnavailable when the database cannot be reached.
func (s *Store) GetPolicy(ctx context.Context, resource string) (quota.Policy, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var r policyRow
	err := s.db.GetContext(ctx, &r,
		`SELECT `+policyColumns+` FROM quota_policy WHERE resource_name = ?`, resource)
	if errors.Is(err, sql.ErrNoRows) {
		return quota.Policy{}, fmt.Errorf("get policy %s: %w", resource, quota.ErrResourceNotFound)
	}
	if err != nil {
		return quota.Policy{}, translate("get policy "+resource, err)
	}
	return r.policy(), nil
}

// ListPolicies reads every policy, ordered by resource name; it returns an
// empty, non-nil slice when there are none. Errors: one wrapping
// quota.ErrUnavailable when the database cannot be reached.
func (s *Store) ListPolicies(ctx context.Context) ([]quota.Policy, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []policyRow
	err := s.db.SelectContext(ctx, &rows,
		`SELECT `+policyColumns+` FROM quota_policy ORDER BY resource_name`)
	if err != nil {
		return nil, translate("list policies", err)
	}
	out := make([]quota.Policy, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.policy())
	}
	return out, nil
}

// PutPolicy creates the policy of p.ResourceName or updates it. UpdatedAt is
// p.UpdatedAt (now when zero); a create stores p.CreatedAt (UpdatedAt when
// zero) and an update keeps the stored CreatedAt. Times are truncated to the
// millisecond and returned in UTC. An update whose settings are the stored
// ones (quota.Policy.SameSettings) writes nothing: it returns the stored
// policy, its UpdatedAt unchanged. It returns the policy as stored by this
// call and whether the call created it; of concurrent PUTs of one new name
// exactly one reports created, and the last one written wins. p is not
// validated here. Errors: one wrapping quota.ErrUnavailable when the
// database cannot be reached.
func (s *Store) PutPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	p, created, err := s.insertPolicy(ctx, p)
	if err != nil || created {
		return p, created, err
	}
	op := "put policy " + p.ResourceName

	// The settings compare in Go, byte for byte (a VARCHAR comparison in
	// MySQL ignores trailing spaces). A concurrent PUT may change the row
	// between the read and the update: the last one written wins, as before.
	var r policyRow
	if err := s.db.GetContext(ctx, &r,
		`SELECT `+policyColumns+` FROM quota_policy WHERE resource_name = ?`, p.ResourceName); err != nil {
		return quota.Policy{}, false, translate(op, err)
	}
	if cur := r.policy(); cur.SameSettings(p) {
		return cur, false, nil
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE quota_policy SET quota_type = ?, total_limit = ?,
		reset_cron = ?, timezone = ?, leak_threshold_seconds = ?, fail_mode = ?, updated_ms = ?
		WHERE resource_name = ?`,
		string(p.QuotaType), p.TotalLimit, p.ResetCron, p.Timezone, p.LeakThresholdSeconds,
		string(p.FailMode.OrDefault()), msOf(p.UpdatedAt), p.ResourceName); err != nil {
		return quota.Policy{}, false, translate(op, err)
	}
	p.CreatedAt = timeOf(r.CreatedMs)
	return p, false, nil
}

// CreatePolicy stores p only when p.ResourceName has no policy, in one
// INSERT whose unique key on resource_name decides between concurrent
// creates: of creates of one new name racing each other exactly one
// reports created. false: a policy of that name exists, nothing was
// written and the policy returned is the zero Policy. Times and validation
// as PutPolicy. Errors: one wrapping
// quota.ErrUnavailable when the database cannot be reached.
func (s *Store) CreatePolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	p, created, err := s.insertPolicy(ctx, p)
	if err != nil || !created {
		return quota.Policy{}, false, err
	}
	return p, true, nil
}

// insertPolicy fills p's times (PutPolicy's rules) and inserts its row if
// its resource has none, reporting whether it did.
func (s *Store) insertPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error) {
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = time.Now()
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = p.UpdatedAt
	}
	p.CreatedAt = timeOf(msOf(p.CreatedAt))
	p.UpdatedAt = timeOf(msOf(p.UpdatedAt))
	p.FailMode = p.FailMode.OrDefault()
	op := "put policy " + p.ResourceName
	// Insert-if-absent: one atomic statement, so concurrent PUTs (or
	// creates) neither deadlock nor both create.
	res, err := s.db.ExecContext(ctx, s.dialect.insertPolicyIfAbsent,
		p.ResourceName, string(p.QuotaType), p.TotalLimit, p.ResetCron, p.Timezone,
		p.LeakThresholdSeconds, string(p.FailMode.OrDefault()), msOf(p.CreatedAt), msOf(p.UpdatedAt))
	if err != nil {
		return quota.Policy{}, false, translate(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return quota.Policy{}, false, translate(op, err)
	}
	return p, n == 1, nil
}
