package quota

import "strconv"

// policyVersion is the policyVersion of apply and heartbeat answers: an
// opaque token that changes when pol is changed (its UpdatedAt, so a new
// limit shows within the policy cache's TTL) and when its period resets
// (the start of the period containing now). A client holding quota ahead of
// use (the Go SDK's LocalPool) returns it and applies again when the token
// changes. Pools fold the state of their grants and lines in here. "" when
// the period cannot be computed.
func (s *Service) policyVersion(pol Policy) string {
	per, err := s.policies.periodAt(pol, s.opt.Now())
	if err != nil {
		return ""
	}
	return strconv.FormatInt(pol.UpdatedAt.UnixMilli(), 36) + "." + strconv.FormatInt(per.Start.UnixMilli(), 36)
}
