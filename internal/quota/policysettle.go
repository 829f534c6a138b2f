package quota

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/quotacenter/quota-center/internal/pools"
)

// maxSettle bounds settleAfterPut's writes: each further one follows a
// change another request committed meanwhile, whose own writer writes too.
const maxSettle = 8

// lockedPoolsReader is the policy store's read of a resource's limit,
// settings and lines under the policy row's lock
// (mysqlstore.Store.ReadPoolsLocked): optional, a store without it is
// checked with unlocked reads.
type lockedPoolsReader interface {
	ReadPoolsLocked(ctx context.Context, resource string) (pools.State, bool, error)
}

// settleAfterPut writes a stored policy's limit and its pools' layout to
// the balance store (after the commit), then reads what the policy store
// holds now and writes again while it differs from what was written. Two
// limit changes, or a limit change and a line's, committed in one order
// could reach Redis in the other (each wrote what it had read, after its
// commit); since every writer checks after its write, the last write is
// always the stored state's (issue 21;
// TestConcurrentLimitChangesLeaveRedisTheStoredLayout). Where the policy
// store has turns (poolsTurn: mysqlstore) the stored limit and layout are
// written once, in the resource's turn, which every other writer of them
// takes too, so no write is overtaken: concurrent limit PUTs take turns
// rather than fail (TestConcurrentLimitPUTsAreNever503). Else the check reads
// under the policy row's lock where the store can (lockedPoolsReader), so
// that a line change that wrote its layout under that lock but has not
// committed yet is waited for. Errors: the stores'; ErrUnavailable after
// maxSettle writes that were each overtaken (a policy store without turns).
func (s *Service) settleAfterPut(ctx context.Context, pol Policy) error {
	if _, ok := s.opt.Pools.Config.(poolsTurn); ok && s.pooled() {
		// In the resource's turn the stored limit and layout are written
		// once: every writer writes in turn, so the last write is the
		// stored state's, however many writers race (8 concurrent limit
		// PUTs used to exhaust maxSettle and answer 503).
		err := s.inPoolsTurn(ctx, pol.ResourceName, func(limit int64, lines []pools.LineSpec, lay pools.Layout) error {
			if err := GuardErr(s.redisFor(pol.ResourceName), func() error {
				return s.balances.SetLimit(ctx, pol.ResourceName, limit)
			}); err != nil {
				return fmt.Errorf("set limit: %w", err)
			}
			if len(lines) == 0 {
				return nil
			}
			if err := s.writeStoredPools(ctx, pol.ResourceName, lines, lay); err != nil {
				return fmt.Errorf("pools: %w", err)
			}
			return nil
		})
		if errors.Is(err, ErrResourceNotFound) {
			return nil // deleted since: DeletePolicy cleans up
		}
		return err
	}
	for range maxSettle {
		if err := GuardErr(s.redisFor(pol.ResourceName), func() error {
			return s.balances.SetLimit(ctx, pol.ResourceName, pol.TotalLimit)
		}); err != nil {
			return fmt.Errorf("set limit: %w", err)
		}
		lay, err := s.relayoutAfterPut(ctx, pol)
		if err != nil {
			return fmt.Errorf("pools: %w", err)
		}
		limit, now, err := s.storedLimitLayout(ctx, pol.ResourceName)
		if errors.Is(err, ErrResourceNotFound) {
			return nil // deleted since: DeletePolicy cleans up
		}
		if err != nil {
			return err
		}
		if limit == pol.TotalLimit && reflect.DeepEqual(lay, now) {
			return nil
		}
		pol.TotalLimit = limit
	}
	return fmt.Errorf("limit and layout of %s changed %d times while being written: %w", pol.ResourceName, maxSettle, ErrUnavailable)
}

// storedLimitLayout reads a resource's stored limit and the layout cut from
// it (the zero Layout without lines or pools' stores), under the policy
// row's lock where the store can. Errors: ErrResourceNotFound, the store's.
func (s *Service) storedLimitLayout(ctx context.Context, resource string) (int64, pools.Layout, error) {
	if r, ok := s.opt.Pools.Config.(lockedPoolsReader); ok && s.pooled() {
		var found bool
		st, err := Guard(s.mysql, func() (st pools.State, err error) {
			st, found, err = r.ReadPoolsLocked(ctx, resource)
			return st, err
		})
		if err != nil {
			return 0, pools.Layout{}, err
		}
		if !found {
			return 0, pools.Layout{}, ErrResourceNotFound
		}
		lay, err := poolView{settings: st.Settings, lines: st.Lines}.layout(st.Limit)
		return st.Limit, lay, err
	}
	pol, err := Guard(s.mysql, func() (Policy, error) { return s.store.GetPolicy(ctx, resource) })
	if err != nil {
		return 0, pools.Layout{}, err
	}
	if !s.pooled() {
		return pol.TotalLimit, pools.Layout{}, nil
	}
	v, err := s.freshPools(ctx, resource)
	if err != nil {
		return 0, pools.Layout{}, err
	}
	lay, err := v.layout(pol.TotalLimit)
	return pol.TotalLimit, lay, err
}
