package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Policy returns a resource's policy from the policy cache
// (policycache.go): fresh for Options.PolicyCacheTTL, then served at once
// while one read in the background refreshes it, and while MySQL is
// unavailable however old. A resource not cached waits for its read at most
// Options.LedgerTimeout. Concurrent misses of one resource share one read: a
// cold cache under load sends one query to MySQL, not one per request.
//
// Errors: ErrResourceNotFound, ErrUnavailable, ErrCircuitOpen.
func (s *Service) Policy(ctx context.Context, resource string) (Policy, error) {
	return s.policies.get(ctx, resource)
}

// Policies lists every policy, sorted by name.
func (s *Service) Policies(ctx context.Context) ([]Policy, error) {
	ps, err := Guard(s.mysql, func() ([]Policy, error) { return s.store.ListPolicies(ctx) })
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	return ps, nil
}

// PutPolicy validates and stores a policy (create or update), then sets its
// limit in the BalanceStore so the change applies to the current period at
// once: remaining moves by the difference, usage stays. Defaults: timezone
// UTC, leakThresholdSeconds 300. With an audit log, the change is recorded
// (actor from ActorFrom(ctx), the policy before and after) once it is stored.
//
// A PUT whose settings are the stored ones (Policy.SameSettings) changes
// nothing: it returns the stored policy, its UpdatedAt and so the
// policyVersion clients see unchanged, and records no audit entry, unless
// that setting was never recorded (see policyAudit). It still sets the limit
// in the BalanceStore and lays out the pools, both idempotent, so a retry
// finishes what an earlier PUT of the same policy left undone.
//
// Errors: *ValidationError, ErrUnavailable (the policy may be stored but the
// limit not yet live, or the change not yet audited: retry the same PUT,
// which stores the same policy, sets the limit and records the change).
func (s *Service) PutPolicy(ctx context.Context, p Policy) (Policy, bool, error) {
	return s.storePolicy(ctx, p, false)
}

// CreatePolicy is PutPolicy that never replaces: the store's insert is the
// only check (PolicyStore.CreatePolicy: one atomic step, so of creates of
// one new name racing each other exactly one is stored and audited). It
// reports false when the resource already has a policy: then nothing was
// stored, audited or changed. Errors as PutPolicy.
func (s *Service) CreatePolicy(ctx context.Context, p Policy) (Policy, bool, error) {
	return s.storePolicy(ctx, p, true)
}

// storePolicy is PutPolicy, or CreatePolicy when createOnly.
func (s *Service) storePolicy(ctx context.Context, p Policy, createOnly bool) (Policy, bool, error) {
	if p.Timezone == "" {
		p.Timezone = "UTC"
	}
	if p.LeakThresholdSeconds == 0 {
		p.LeakThresholdSeconds = DefaultLeakThresholdSeconds
	}
	p.FailMode = p.FailMode.OrDefault()
	if err := s.ValidatePolicy(p); err != nil {
		return Policy{}, false, err
	}
	now := s.opt.Now().UTC().Truncate(time.Millisecond)
	p.CreatedAt, p.UpdatedAt = now, now
	audit, err := s.policyAudit(ctx, p.ResourceName, now)
	if err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	var stored Policy
	var created bool
	err = GuardErr(s.mysql, func() (err error) {
		if s.pooled() {
			stored, created, err = s.putPooledPolicy(ctx, p, createOnly)
		} else if createOnly {
			stored, created, err = s.store.CreatePolicy(ctx, p)
		} else {
			stored, created, err = s.store.PutPolicy(ctx, p)
		}
		return err
	})
	if ve := (*ValidationError)(nil); errors.As(err, &ve) {
		return Policy{}, false, ve // the limit does not fit the pools (putPooledPolicy)
	}
	if err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	if createOnly && !created {
		return Policy{}, false, nil
	}
	// The store keeps the stored UpdatedAt when the settings were already
	// there (a change made within this millisecond counts as a change).
	unchanged := !created && !stored.UpdatedAt.Equal(now)
	if err := audit(stored, created, unchanged); err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	s.policies.drop(p.ResourceName)
	// The limit and layout in Redis: what the policy store holds once
	// written (a change committed meanwhile is written again).
	if err := s.settleAfterPut(ctx, stored); err != nil {
		return Policy{}, false, fmt.Errorf("put policy %s: %w", p.ResourceName, err)
	}
	return stored, created, nil
}

// ValidatePolicy checks every field of a policy; it returns the first
// *ValidationError.
func (s *Service) ValidatePolicy(p Policy) error {
	if err := ValidateResourceName(p.ResourceName); err != nil {
		return err
	}
	if !p.QuotaType.Valid() {
		return invalid("quotaType", "must be one of DURATION, COUNT, TOKENS, BANDWIDTH")
	}
	if err := ValidateAmount("totalLimit", p.TotalLimit, false); err != nil {
		return err
	}
	if m := p.FailMode.OrDefault(); m != FailClosed && m != FailOpen {
		return invalid("failMode", "must be CLOSED or OPEN")
	}
	if p.LeakThresholdSeconds < 1 || p.LeakThresholdSeconds > MaxLeakThresholdSeconds {
		return invalid("leakThresholdSeconds", fmt.Sprintf("must be 1 to %d seconds", MaxLeakThresholdSeconds))
	}
	return s.sched.Validate(p.ResetCron, p.Timezone)
}
