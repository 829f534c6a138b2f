package quota

import (
	"context"
	"strconv"
)

// policyVersion is the policyVersion of apply and heartbeat answers: an
// opaque token that changes when pol is changed (its UpdatedAt, so a new
// limit shows within the policy cache's TTL), when its period resets (the
// start of the period containing now), and when its pools change (a line,
// the pool settings, a temporary grant or a buffer release; PoolUse.Version,
// within the policy cache's TTL, read through it). A client holding quota ahead of use
// (the Go SDK's LocalPool) returns it and applies again when the token
// changes. "" when the period or the pools cannot be read.
func (s *Service) policyVersion(ctx context.Context, pol Policy) string {
	per, err := s.policies.periodAt(pol, s.opt.Now())
	if err != nil {
		return ""
	}
	var buf [64]byte // one string made, not three
	b := strconv.AppendInt(buf[:0], pol.UpdatedAt.UnixMilli(), 36)
	b = strconv.AppendInt(append(b, '.'), per.Start.UnixMilli(), 36)
	use, err := s.policies.poolsOf(ctx, pol.ResourceName)
	if err != nil {
		return ""
	}
	if use.Version != "" {
		b = append(append(b, '.'), use.Version...)
	}
	return string(b)
}
