package quota

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// PoolStores are the pools' parts of the stores (Options.Pools): the
// Service reads a resource's pools through them into its one policy+pools
// cache, and writes them back to the balance store in its seed step
// (issue 21 §1: the pooled apply is a variant of the one apply; nothing
// outside quota is called to drive the balance). Set both or neither;
// Config nil: no resource uses pools. Every call goes through the backend
// breakers (Options.Breakers), as the Service's other store calls do.
type PoolStores struct {
	Config   PoolConfig   // the policy store and ledger (mysqlstore)
	Balances PoolBalances // the balance store (redisstore)
}

// PoolConfig is what the Service reads of the pools in the policy store
// and ledger (MySQL): the configuration the operators keep there
// (internal/admin writes it) and what the ledger's rows drew.
type PoolConfig interface {
	// Lines lists a resource's business lines (none: a plain resource).
	Lines(ctx context.Context, resource string) ([]pools.LineSpec, error)
	// PoolSettings reads its pool settings (the defaults when none are
	// stored; ok false then).
	PoolSettings(ctx context.Context, resource string) (s pools.Settings, ok bool, err error)
	// Grants lists its temporary grants and buffer releases not expired at
	// since (Unix ms).
	Grants(ctx context.Context, resource string, since int64) ([]pools.GrantRecord, error)
	// GrantsHeld is what the ledger's sessions since (Unix ms) hold of
	// each grant: settled by grant id, and the open sessions' draws.
	GrantsHeld(ctx context.Context, resource string, since int64) (pools.GrantUse, error)
	// PoolMoves rebuilds the controller's and operators' moves from the
	// pool events and reclaims (after Redis lost the layout).
	PoolMoves(ctx context.Context, resource string) (pools.Moves, error)
	// PoolTotals is what the period's rows drew from each pool, by line
	// (finished rows summed, open rows one by one).
	PoolTotals(ctx context.Context, resource string, periodStart time.Time) (pools.Totals, error)
	// RecordPoolEvents journals pool events (the lent buffer a layout cut
	// back, as RETURN events: PoolMoves counts them).
	RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error
	// UpdatePolicyLocked updates a stored policy in one transaction that
	// first locks its row, the lock every change of the resource's pools
	// takes: check is asked with the pools read under it (grants and
	// releases expiring after since, Unix ms) and its error returned with
	// nothing written; settings equal to the stored ones write nothing and
	// skip check. With p.Pools the pool settings are checked (the State's
	// Settings are p.Pools) and written in the same transaction, so the
	// policy and its settings are stored together or not at all.
	// found false: no such policy, nothing written.
	UpdatePolicyLocked(ctx context.Context, p Policy, since int64, check func(pools.State) error) (stored Policy, found bool, err error)
}

// PoolBalances is the pools' part of the balance store (Redis). Each write
// is idempotent.
type PoolBalances interface {
	// SetPoolLayout writes a resource's layout (an empty one removes its
	// pools); with moves nil it writes only where the store still has a
	// layout, and reports whether it did, and the lent buffer a smaller
	// buffer cut back (pools.Model.Relayout's cuts).
	SetPoolLayout(ctx context.Context, resource string, lay pools.Layout, moves *pools.Moves) (bool, []pools.Cut, error)
	// RestoreGrants writes the temporary grants, with what is held of
	// each, unless the store has them; reports whether it did.
	RestoreGrants(ctx context.Context, resource string, gs []pools.Grant, open []pools.OpenDraw) (bool, error)
	// SeedPools writes the period's pool counters from t unless they are
	// there, and reports whether it did; the period's balance must exist.
	SeedPools(ctx context.Context, resource string, per Period, t pools.Totals) (bool, error)
	// SpareNotes: the notes of the spare buffer's moves not yet journalled.
	SpareNotes
}

// pooled reports whether the Service has pools' stores.
func (s *Service) pooled() bool { return s.opt.Pools.Config != nil }

// poolView is what the policy+pools cache keeps of a resource's pools:
// its use (for the apply) and the configuration its layout is cut from.
type poolView struct {
	use      PoolUse
	lines    []pools.LineSpec
	settings pools.Settings // read only when there are lines
	grants   []pools.GrantRecord
}

// layout is the view's layout under limit (an empty one without lines).
// Errors: the lines do not fit limit (pools.Plan's).
func (v poolView) layout(limit int64) (pools.Layout, error) {
	if len(v.lines) == 0 {
		return pools.Layout{}, nil
	}
	return pools.Plan(limit, v.settings, v.lines)
}

// readPools reads a resource's pools from the policy store through the
// ledger's breaker, with the grants and releases in force at now (Unix
// ms): the policy+pools cache's read, and the fresh read of the seed step
// and of a limit check (a layout written from a stale copy would undo an
// operator's change). Errors: the store's.
func readPools(ctx context.Context, cfg PoolConfig, mysql Breaker, resource string, now int64) (poolView, error) {
	lines, err := Guard(mysql, func() ([]pools.LineSpec, error) { return cfg.Lines(ctx, resource) })
	if err != nil {
		return poolView{}, err
	}
	gs, err := Guard(mysql, func() ([]pools.GrantRecord, error) { return cfg.Grants(ctx, resource, now) })
	if err != nil {
		return poolView{}, err
	}
	v := poolView{lines: lines, grants: gs}
	if len(lines) > 0 {
		v.use.Lines = make(map[string]pools.Tier, len(lines))
		for _, l := range lines {
			v.use.Lines[l.Name] = l.Tier
		}
		v.settings, err = Guard(mysql, func() (pools.Settings, error) {
			set, _, err := cfg.PoolSettings(ctx, resource)
			return set, err
		})
		if err != nil {
			return poolView{}, err
		}
	}
	for _, g := range gs {
		if g.Kind == pools.KindGrant && !g.Voided {
			v.use.Grants = true
		}
	}
	v.use.Version = v.version(gs, now)
	return v, nil
}

// version is PoolUse.Version: a hash of the lines, the pool settings (when
// there are lines) and the grants and releases in force at now (ms), by id;
// "" for a resource without any.
func (v poolView) version(gs []pools.GrantRecord, now int64) string {
	h := fnv.New64a()
	for _, l := range v.lines {
		fmt.Fprintf(h, "l %s %s %d %d\n", l.Name, l.Tier, l.Weight, l.Dedicated)
	}
	if len(v.lines) > 0 {
		fmt.Fprintf(h, "s %+v\n", v.settings)
	}
	n := 0
	for _, g := range gs {
		if g.Active(now) {
			fmt.Fprintf(h, "g %s %d\n", g.ID, g.Amount)
			n++
		}
	}
	if len(v.lines) == 0 && n == 0 {
		return ""
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// freshPools reads a resource's pools afresh (readPools at the Service's
// clock).
func (s *Service) freshPools(ctx context.Context, resource string) (poolView, error) {
	return readPools(ctx, s.opt.Pools.Config, s.mysql, resource, s.opt.Now().UnixMilli())
}

// PoolsOf says how a resource uses pools, from the policy+pools cache (the
// zero PoolUse without pools' stores). Errors: ErrUnavailable,
// ErrCircuitOpen when the policy store cannot be read and nothing is
// cached.
func (s *Service) PoolsOf(ctx context.Context, resource string) (PoolUse, error) {
	return s.policies.poolsOf(ctx, resource)
}

// WritePoolLayout writes a resource's layout to the balance store (after
// its limit, settings or lines changed, or after the store lost it); where
// the store has no layout of the resource, with the moves rebuilt from the
// policy store (PoolConfig.PoolMoves). An empty layout removes the pools.
// Lent buffer that a smaller buffer cut back is journalled as RETURN pool
// events (pools.Cut.Event), as a voided release's returned buffer is, so
// the event stream and a rebuild after Redis loss agree with the balance;
// when that write fails the error is returned (the cut stays: the store
// bounds a rebuild by the buffer anyway, pools.Moves.Fields).
// Errors: the stores' (ErrUnavailable, ErrCircuitOpen).
func (s *Service) WritePoolLayout(ctx context.Context, resource string, lay pools.Layout) error {
	if !s.pooled() {
		return fmt.Errorf("pools of %s: the Service has no pools' stores", resource)
	}
	bal := s.opt.Pools.Balances
	var cuts []pools.Cut
	set := func(m *pools.Moves) func() (bool, error) {
		return func() (ok bool, err error) {
			ok, cuts, err = bal.SetPoolLayout(ctx, resource, lay, m)
			return ok, err
		}
	}
	ok, err := Guard(s.redisFor(resource), set(nil))
	if err != nil {
		return err
	}
	if !ok {
		moves, err := Guard(s.mysql, func() (pools.Moves, error) { return s.opt.Pools.Config.PoolMoves(ctx, resource) })
		if err != nil {
			return err
		}
		if _, err = Guard(s.redisFor(resource), set(&moves)); err != nil {
			return err
		}
	}
	if len(cuts) == 0 {
		return nil
	}
	at := s.opt.Now().UnixMilli()
	// The cut is of buffer some moves put where it was: those are
	// journalled first (DrainSpareMoves).
	if err := s.DrainSpareMoves(ctx, resource); err != nil {
		return err
	}
	evs := make([]pools.Event, 0, len(cuts))
	for _, c := range cuts {
		evs = append(evs, c.Event(at))
	}
	return GuardErr(s.mysql, func() error {
		return s.opt.Pools.Config.RecordPoolEvents(context.WithoutCancel(ctx), resource, evs)
	})
}

// RestorePoolGrants writes a resource's temporary grants that have not
// expired back to the balance store, with what sessions hold of each
// (rebuilt from the ledger), unless the store has them: in the seed step
// before the period's pool counters, and before a grant is added
// (internal/admin). Errors: the stores'.
func (s *Service) RestorePoolGrants(ctx context.Context, resource string) error {
	if !s.pooled() {
		return fmt.Errorf("pools of %s: the Service has no pools' stores", resource)
	}
	cfg := s.opt.Pools.Config
	now := s.opt.Now().UnixMilli()
	recs, err := Guard(s.mysql, func() ([]pools.GrantRecord, error) { return cfg.Grants(ctx, resource, now) })
	if err != nil {
		return err
	}
	var gs []pools.Grant
	var open []pools.OpenDraw
	since := now
	for _, g := range recs {
		if g.Kind == pools.KindGrant && !g.Voided {
			gs = append(gs, g.Grant)
			since = min(since, g.EffectiveMs)
		}
	}
	if len(gs) > 0 {
		held, err := Guard(s.mysql, func() (pools.GrantUse, error) { return cfg.GrantsHeld(ctx, resource, since) })
		if err != nil {
			return err
		}
		for i := range gs {
			gs[i].Used = held.Settled[gs[i].ID]
		}
		open = held.Open
	}
	_, err = Guard(s.redisFor(resource), func() (bool, error) {
		return s.opt.Pools.Balances.RestoreGrants(ctx, resource, gs, open)
	})
	return err
}

// relayoutPools writes pol's pools to the balance store again where it
// lost them: the layout cut from pol's limit (with the moves, when lost),
// then the temporary grants. v is the resource's pools, read afresh.
func (s *Service) relayoutPools(ctx context.Context, pol Policy, v poolView) error {
	lay, err := v.layout(pol.TotalLimit)
	if err != nil {
		return fmt.Errorf("pools of %s: %w", pol.ResourceName, err)
	}
	if err := s.WritePoolLayout(ctx, pol.ResourceName, lay); err != nil {
		return err
	}
	return s.RestorePoolGrants(ctx, pol.ResourceName)
}

// seedPools is the pools' part of seeding a period (seed): for a resource
// that uses pools (as the policy+pools cache says: a plain resource costs
// no read here), its configuration back in the balance store where it was
// lost (RelayoutPools, in the resource's turn), then the period's pool counters
// rebuilt from the ledger unless they are there. The balance must exist.
// Errors: the stores'.
func (s *Service) seedPools(ctx context.Context, pol Policy, per Period) error {
	if !s.pooled() {
		return nil
	}
	use, err := s.policies.poolsOf(ctx, pol.ResourceName)
	if err != nil || (len(use.Lines) == 0 && !use.Grants) {
		return err
	}
	// The stored layout and grants, in the resource's turn (a layout
	// written from an unlocked read could undo a line change meanwhile).
	if err := s.RelayoutPools(ctx, pol.ResourceName); err != nil {
		return err
	}
	t, err := Guard(s.mysql, func() (pools.Totals, error) { return s.opt.Pools.Config.PoolTotals(ctx, pol.ResourceName, per.Start) })
	if err != nil {
		return err
	}
	_, err = Guard(s.redisFor(pol.ResourceName), func() (bool, error) {
		return s.opt.Pools.Balances.SeedPools(ctx, pol.ResourceName, per, t)
	})
	return err
}

// relayoutAfterPut writes the layout of a resource with business lines
// again after its limit may have changed (the pools are cut from the
// limit), and returns it (the zero Layout when none was written).
func (s *Service) relayoutAfterPut(ctx context.Context, pol Policy) (pools.Layout, error) {
	if !s.pooled() {
		return pools.Layout{}, nil
	}
	v, err := s.freshPools(ctx, pol.ResourceName)
	if err != nil || len(v.lines) == 0 {
		return pools.Layout{}, err
	}
	lay, err := v.layout(pol.TotalLimit)
	if err != nil {
		return lay, fmt.Errorf("pools of %s: %w", pol.ResourceName, err)
	}
	return lay, s.relayoutPools(ctx, pol, v)
}
