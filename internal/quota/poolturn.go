package quota

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
)

// poolsTurn is the policy store's turn of a resource's pools
// (mysqlstore.Store.InPoolsTurn): write is called with the stored limit,
// settings and lines while no other change of them can commit, so what it
// writes to Redis is the stored state's and lands in the order of the
// changes (they write Redis in the same turn). Optional: without it the
// state is read unlocked.
type poolsTurn interface {
	InPoolsTurn(ctx context.Context, resource string, write func(pools.State) error) (found bool, err error)
}

// inPoolsTurn calls write with resource's stored limit and lines, in its
// turn where the policy store has turns (poolsTurn). Errors:
// ErrResourceNotFound, the stores', write's.
func (s *Service) inPoolsTurn(ctx context.Context, resource string, write func(limit int64, lines []pools.LineSpec, lay pools.Layout) error) error {
	with := func(st pools.State) error {
		lay, err := poolView{settings: st.Settings, lines: st.Lines}.layout(st.Limit)
		if err != nil {
			return fmt.Errorf("pools of %s: %w", resource, err)
		}
		return write(st.Limit, st.Lines, lay)
	}
	if t, ok := s.opt.Pools.Config.(poolsTurn); ok && s.pooled() {
		found, err := t.InPoolsTurn(ctx, resource, with)
		if err == nil && !found {
			err = fmt.Errorf("pools of %s: %w", resource, ErrResourceNotFound)
		}
		return err
	}
	pol, err := Guard(s.mysql, func() (Policy, error) { return s.store.GetPolicy(ctx, resource) })
	if err != nil {
		return err
	}
	st := pools.State{Limit: pol.TotalLimit}
	if s.pooled() {
		v, err := s.freshPools(ctx, resource)
		if err != nil {
			return err
		}
		st.Lines, st.Settings = v.lines, v.settings
	}
	return with(st)
}

// writeStoredPools writes a resource's stored layout (lay; an empty one
// removes the pools when Redis still has lines) and its temporary grants
// to the balance store: where Redis lost the layout, with the moves rebuilt
// from the journal (WritePoolLayout). Called in the resource's turn.
func (s *Service) writeStoredPools(ctx context.Context, resource string, lines []pools.LineSpec, lay pools.Layout) error {
	if err := s.WritePoolLayout(ctx, resource, lay); err != nil {
		return err
	}
	return s.RestorePoolGrants(ctx, resource)
}

// RelayoutPools writes a resource's pools as the policy store holds them
// back to the balance store, in the resource's turn (the policy row's lock
// every change of its pools takes): the layout cut from the stored limit,
// with the controller's and operators' moves rebuilt from the journal
// where Redis lost it, and the temporary grants, as the seed step does. An
// operator's buffer release calls it before it moves the buffer, so that a
// release right after Redis lost its data finds the layout (it answered
// 404 "unknown business line" until an apply rebuilt it). Errors:
// ErrResourceNotFound, ErrUnavailable, ErrCircuitOpen, the layout's.
func (s *Service) RelayoutPools(ctx context.Context, resource string) error {
	if !s.pooled() {
		return fmt.Errorf("pools of %s: the Service has no pools' stores", resource)
	}
	return s.inPoolsTurn(ctx, resource, func(_ int64, lines []pools.LineSpec, lay pools.Layout) error {
		return s.writeStoredPools(ctx, resource, lines, lay)
	})
}

// applyInTurn is an apply whose line the balance store did not know (it
// lost the layout, or a line change overtook the instance's cached lines):
// in the resource's turn, the stored lines decide. A line that is not
// stored (or a line missing on a resource that has lines) is the caller's
// error, as poolsCmd answers it; else the stored layout is written and the
// apply runs again before any other change of the lines can reach Redis,
// so line churn cannot make it fail again (it answered 503 "period or
// balance kept changing" after four tries). The instance's cached copy of
// the pools is dropped either way.
func (s *Service) applyInTurn(ctx context.Context, pol Policy, cmd ApplyCmd) (res ApplyResult, err error) {
	defer s.policies.drop(pol.ResourceName)
	line := cmd.Pools.Line
	err = s.inPoolsTurn(ctx, pol.ResourceName, func(_ int64, lines []pools.LineSpec, lay pools.Layout) error {
		known := false
		for _, l := range lines {
			known = known || l.Name == line
		}
		switch {
		case line != "" && !known:
			return invalid("businessLine", "is not a line of "+pol.ResourceName)
		case line == "" && len(lines) > 0:
			return invalid("businessLine", "is required: "+pol.ResourceName+" has business lines")
		}
		if err := s.writeStoredPools(ctx, pol.ResourceName, lines, lay); err != nil {
			return err
		}
		res, err = Guard(s.redisFor(cmd.ResourceName), func() (ApplyResult, error) { return s.balances.Apply(ctx, cmd) })
		return err
	})
	return res, err
}
