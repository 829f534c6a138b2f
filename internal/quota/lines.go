package quota

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
)

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
	use, err := s.policies.poolsOf(ctx, pol.ResourceName)
	if err != nil {
		return nil, fmt.Errorf("apply %s: pools: %w", pol.ResourceName, err)
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
