package quota

import (
	"context"
	"errors"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
)

// PoolSource tells the Service which resources use pools (business lines
// or temporary grants; internal/pools) and repairs what the balance store
// lost of them (Options.Pools; nil: no resource uses pools). Its backend
// calls go through the backend breakers itself (poolctl.Guarded).
type PoolSource interface {
	// PoolsOf says whether a resource has lines (and which) or grants.
	PoolsOf(ctx context.Context, resource string) (PoolUse, error)
	// Relayout writes a resource's pool layout to the balance store again.
	Relayout(ctx context.Context, resource string) error
	// SeedPools writes a period's pool counters, rebuilt from the ledger,
	// unless they are there.
	SeedPools(ctx context.Context, resource string, per Period) error
	// CheckLimit says whether a resource's lines fit a new limit (their
	// explicit dedicated amounts): nil, or a *ValidationError.
	CheckLimit(ctx context.Context, resource string, limit int64) error
}

// PoolUse is how a resource uses pools.
type PoolUse struct {
	Lines  map[string]pools.Tier // its business lines; empty: none
	Grants bool                  // it has temporary grants not yet expired
	// Version changes when the resource's lines, pool settings, temporary
	// grants or buffer releases change (one is added, voided, starts or
	// ends); "" for a resource without any. It is folded into the
	// policyVersion of apply and heartbeat answers.
	Version string
}

// Pool names of Draw for pools' grants.
const (
	PoolDedicated = "dedicated"
	PoolShared    = "shared"
	PoolBuffer    = "buffer"
	PoolGrant     = "grant"
)

// Refusal reasons of resources with pools (HTTP 429 QUOTA_EXHAUSTED with
// "reason"); see internal/pools.
const (
	RefusedLineExhausted RefusalReason = RefusalReason(pools.ReasonLineExhausted)
	RefusedWatermark     RefusalReason = RefusalReason(pools.ReasonWatermark)
	RefusedPoolExhausted RefusalReason = RefusalReason(pools.ReasonPoolExhausted)
)

// poolsCmd validates an apply's pools fields against the resource's use of
// pools and returns the store's PoolsCmd (nil when it uses none).
func (s *Service) poolsCmd(ctx context.Context, pol Policy, req ApplyRequest) (*PoolsCmd, error) {
	if req.BusinessLine != "" {
		if err := pools.ValidateLineName(req.BusinessLine); err != nil {
			return nil, invalid("businessLine", "must be 1 to 64 characters of [a-z0-9_.-]")
		}
	}
	var use PoolUse
	if s.opt.Pools != nil {
		u, err := s.policies.poolsOf(ctx, pol.ResourceName)
		if err != nil {
			return nil, fmt.Errorf("apply %s: pools: %w", pol.ResourceName, err)
		}
		use = u
	}
	switch {
	case len(use.Lines) > 0 && req.BusinessLine == "":
		return nil, invalid("businessLine", "is required: "+pol.ResourceName+" has business lines")
	case len(use.Lines) == 0 && req.BusinessLine != "":
		return nil, invalid("businessLine", pol.ResourceName+" has no business lines")
	case req.BusinessLine != "" && use.Lines[req.BusinessLine] == "":
		return nil, invalid("businessLine", "is not a line of "+pol.ResourceName)
	case len(use.Lines) == 0 && !use.Grants:
		return nil, nil
	}
	return &PoolsCmd{Line: req.BusinessLine, Critical: !req.NonCritical, Continuation: req.Continuation, NoGrants: !use.Grants}, nil
}

// relayout reports whether an apply failed because the balance store lost
// the resource's layout (an unknown line the Service knows), after writing
// it again: the caller retries.
func (s *Service) relayout(ctx context.Context, cmd ApplyCmd, err error) bool {
	if cmd.Pools == nil || s.opt.Pools == nil || !errors.Is(err, pools.ErrUnknownLine) {
		return false
	}
	return s.opt.Pools.Relayout(ctx, cmd.ResourceName) == nil
}

// seedPools rebuilds the period's pool counters of a pools' apply.
func (s *Service) seedPools(ctx context.Context, cmd ApplyCmd) error {
	if cmd.Pools == nil || s.opt.Pools == nil {
		return nil
	}
	if err := s.opt.Pools.Relayout(ctx, cmd.ResourceName); err != nil {
		return err
	}
	return s.opt.Pools.SeedPools(ctx, cmd.ResourceName, cmd.Period)
}

// refusalReason is the reason of a refused apply.
func refusalReason(res ApplyResult) RefusalReason {
	if res.Reason != "" && res.Reason != pools.ReasonExhausted {
		return RefusalReason(res.Reason)
	}
	return RefusedExhausted
}

// PoolSplit is which pools a grant drew from (a comparable form of
// pools.Drawn: Grants is "id=n;id=n").
type PoolSplit struct {
	Base      int64 // a resource without lines: from its limit
	Dedicated int64
	Shared    int64
	Buffer    int64
	Grant     int64
	Grants    string
}

// SplitOf is the PoolSplit of d.
func SplitOf(d pools.Drawn) PoolSplit {
	return PoolSplit{Base: d.Base, Dedicated: d.Dedicated, Shared: d.Shared, Buffer: d.Buffer, Grant: d.Grant, Grants: pools.FormatGrants(d.Grants)}
}

// Drawn is the pools.Drawn of p.
func (p PoolSplit) Drawn() pools.Drawn {
	return pools.Drawn{Base: p.Base, Dedicated: p.Dedicated, Shared: p.Shared, Buffer: p.Buffer, Grant: p.Grant, Grants: pools.ParseGrants(p.Grants)}
}

// PoolSession reports whether r is a pools' session (applied on a line or
// with temporary grants), whose split the balance store keeps with it.
func (r UsageRecord) PoolSession() bool {
	return r.BusinessLine != "" || r.Drawn != PoolSplit{}
}

// poolDraws lists a pools' grant by pool, omitting empty ones.
func poolDraws(d PoolSplit) []Draw {
	var out []Draw
	for _, x := range []Draw{{"", d.Base}, {PoolDedicated, d.Dedicated}, {PoolShared, d.Shared}, {PoolBuffer, d.Buffer}, {PoolGrant, d.Grant}} {
		if x.Amount > 0 {
			out = append(out, x)
		}
	}
	return out
}

// checkPoolsLimit refuses a limit the resource's business lines do not fit.
func (s *Service) checkPoolsLimit(ctx context.Context, p Policy) error {
	if s.opt.Pools == nil {
		return nil
	}
	return s.opt.Pools.CheckLimit(ctx, p.ResourceName, p.TotalLimit)
}

// relayoutPools writes the layout of a resource with business lines again
// after its limit may have changed (the pools are cut from the limit).
func (s *Service) relayoutPools(ctx context.Context, resource string) error {
	if s.opt.Pools == nil {
		return nil
	}
	use, err := s.opt.Pools.PoolsOf(ctx, resource)
	if err != nil || len(use.Lines) == 0 {
		return err
	}
	return s.opt.Pools.Relayout(ctx, resource)
}
