package quota

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
)

// putPooledPolicy stores p on a Service with pools' stores. An update
// checks and writes under the lock of the policy row that every change of
// the resource's pools takes (PoolConfig.UpdatePolicyLocked), so a limit
// cut racing a line PUT or a grant cannot leave a layout that no longer
// fits the stored limit: one of them is refused (issue 21's turns). A
// create (the resource has no policy yet, so no lines or grants; or
// createOnly) inserts if absent; when another create wins that race the
// update is tried again under the lock. p.Pools (pool settings) are stored
// in the update's transaction; a create stores the policy alone.
// Errors: *ValidationError naming "totalLimit" (checkLimitFits), the
// stores'.
func (s *Service) putPooledPolicy(ctx context.Context, p Policy, createOnly bool) (Policy, bool, error) {
	cfg := s.opt.Pools.Config
	check := func(st pools.State) error { return checkLimitFits(p, st) }
	create := func() (Policy, bool, error) {
		// Lines and grants outlive a deleted policy (DeletePolicy keeps
		// them): a new policy of their resource is checked against them
		// as read now (a create takes no row lock: there is no row yet).
		v, err := s.freshPools(ctx, p.ResourceName)
		if err != nil {
			return Policy{}, false, err
		}
		if p.Pools != nil {
			v.settings = *p.Pools // checked here; the caller stores them after the create
		}
		if err := check(pools.State{Settings: v.settings, Lines: v.lines, Grants: v.grants}); err != nil {
			return Policy{}, false, err
		}
		return s.store.CreatePolicy(ctx, p)
	}
	if createOnly {
		return create()
	}
	for range 3 {
		stored, found, err := cfg.UpdatePolicyLocked(ctx, p, s.opt.Now().UnixMilli(), check)
		if err != nil || found {
			return stored, false, err
		}
		stored, created, err := create()
		if err != nil || created {
			return stored, created, err
		}
	}
	return Policy{}, false, fmt.Errorf("put policy %s: created and deleted concurrently three times: %w", p.ResourceName, ErrUnavailable)
}

// checkLimitFits refuses p's limit when the resource's pools, as st holds
// them (read under the policy row's lock), do not fit it: the business
// lines must fit the layout cut from it with the stored pool settings
// (pools.Plan), and the limit plus the grants not yet expired must stay
// within pools.MaxAmount (2^53-1: the scripts add them up in Lua numbers).
// A resource without lines or grants fits any valid limit.
// Errors: *ValidationError of field "totalLimit".
func checkLimitFits(p Policy, st pools.State) error {
	if len(st.Lines) > 0 {
		if _, err := pools.Plan(p.TotalLimit, st.Settings, st.Lines); err != nil {
			return &ValidationError{Field: "totalLimit", Reason: "does not fit the business lines of " + p.ResourceName + ": " + err.Error()}
		}
	}
	room := pools.MaxAmount - p.TotalLimit
	for _, g := range st.Grants {
		if g.Kind == pools.KindGrant && !g.Voided {
			room -= g.Amount
		}
	}
	if room < 0 {
		return &ValidationError{Field: "totalLimit", Reason: fmt.Sprintf(
			"the limit and the grants not yet expired of %s would pass 2^53-1 in all: at most %d", p.ResourceName, p.TotalLimit+room)}
	}
	return nil
}
