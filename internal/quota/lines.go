package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// PoolSource is the pools' configuration (business lines, pool settings,
// temporary grants; internal/pools) as the policy store holds it
// (Options.Pools; nil: no resource uses pools). Its backend calls go
// through the backend breakers itself (poolctl.Guarded). The period's pool
// counters are not its job: the Service seeds them with the balance
// (PoolLedger, PoolCounters).
type PoolSource interface {
	// PoolsOf says whether a resource has lines (and which) or grants.
	PoolsOf(ctx context.Context, resource string) (PoolUse, error)
	// Relayout writes a resource's pool configuration to the balance store
	// again where it lost it: the layout (with the controller's and
	// operators' moves) and the temporary grants with what sessions hold
	// of each. Idempotent.
	Relayout(ctx context.Context, resource string) error
	// CheckLimit says whether a resource's lines fit a new limit (their
	// explicit dedicated amounts): nil, or a *ValidationError.
	CheckLimit(ctx context.Context, resource string, limit int64) error
}

// PoolLedger is the ledger's part of seeding a period's pool counters
// (mysqlstore): what the period's rows drew from each pool, by line
// (finished rows summed, open rows one by one).
type PoolLedger interface {
	PoolTotals(ctx context.Context, resource string, periodStart time.Time) (pools.Totals, error)
}

// PoolCounters is the balance store's part (redisstore): it writes the
// period's pool counters from t unless they are there, and reports whether
// it did; the period's balance must exist.
type PoolCounters interface {
	SeedPools(ctx context.Context, resource string, per Period, t pools.Totals) (bool, error)
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

// seedPools is the pools' part of seeding a period (seed): for a resource
// that uses pools, its configuration back in the balance store where it
// was lost (PoolSource.Relayout), then the period's pool counters rebuilt
// from the ledger unless they are there. The balance must exist. Errors:
// the stores', and an error when they cannot seed pool counters.
func (s *Service) seedPools(ctx context.Context, resource string, per Period) error {
	if s.opt.Pools == nil {
		return nil
	}
	use, err := s.opt.Pools.PoolsOf(ctx, resource) // behind its own breakers
	if err != nil || (len(use.Lines) == 0 && !use.Grants) {
		return err
	}
	pl, okL := s.ledger.(PoolLedger)
	pc, okB := s.balances.(PoolCounters)
	if !okL || !okB {
		return fmt.Errorf("pools of %s: the stores cannot seed pool counters", resource)
	}
	if err := s.opt.Pools.Relayout(ctx, resource); err != nil {
		return err
	}
	t, err := Guard(s.mysql, func() (pools.Totals, error) { return pl.PoolTotals(ctx, resource, per.Start) })
	if err != nil {
		return err
	}
	_, err = Guard(s.redisFor(resource), func() (bool, error) { return pc.SeedPools(ctx, resource, per, t) })
	return err
}

// refusalReason is the reason of a refused apply.
func refusalReason(res ApplyResult) RefusalReason {
	if res.Reason != "" && res.Reason != pools.ReasonExhausted {
		return RefusalReason(res.Reason)
	}
	return RefusedExhausted
}

// PoolSplit is which pools a grant drew from, in the policy's unit: the
// one form of it from the apply script's reply (redisstore) through
// ApplyResult, Decision and the ledger row (UsageRecord) to the API's
// "drawn" (its JSON: dedicated, shared, buffer, grant; Base and Grants are
// not on the wire). A comparable form of pools.Drawn (Grants is
// "id=n;id=n", pools.FormatGrants).
type PoolSplit struct {
	Base      int64  `json:"-"` // a resource without lines: from its limit
	Dedicated int64  `json:"dedicated"`
	Shared    int64  `json:"shared"`
	Buffer    int64  `json:"buffer"`
	Grant     int64  `json:"grant"` // sum of Grants
	Grants    string `json:"-"`
}

// Pooled reports whether the grant drew from a line's pools or a
// temporary grant (anything but the base): the API shows "drawn" then.
func (p PoolSplit) Pooled() bool {
	return p.Dedicated != 0 || p.Shared != 0 || p.Buffer != 0 || p.Grant != 0
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
