package quota

import (
	"context"
	"time"
	"unicode/utf8"
)

// Audit actions of the operator's endpoints (internal/admin).
const (
	// ActionPolicyReset: POST /admin/policies/{r}/reset started a new period.
	ActionPolicyReset = "policy.reset"
	// ActionPolicyDelete: DELETE /admin/policies/{r} removed a policy.
	ActionPolicyDelete = "policy.delete"
	// ActionSessionFinish: POST /admin/sessions/{id}/finish settled a
	// session on a client's behalf.
	ActionSessionFinish = "session.finish"
)

// MaxReasonLength bounds an audit entry's reason, in characters.
const MaxReasonLength = 500

// PeriodAnchor is where the policy's sequence of periods starts: the later
// of CreatedAt and ResetAt, in UTC at millisecond precision. The first
// period (and the first after a manual reset) starts there, not at the
// previous cron fire time.
func (p Policy) PeriodAnchor() time.Time {
	a := p.CreatedAt
	if p.ResetAt.After(a) {
		a = p.ResetAt
	}
	return a.UTC().Truncate(time.Millisecond)
}

type reasonKey struct{}

// WithReason returns ctx carrying the operator's reason for a change; the
// audit entry of the change records it.
func WithReason(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, reasonKey{}, reason)
}

// ReasonFrom returns the reason set by WithReason, or "".
func ReasonFrom(ctx context.Context) string {
	r, _ := ctx.Value(reasonKey{}).(string)
	return r
}

// ValidateReason checks an operator's reason: at most MaxReasonLength
// characters of valid UTF-8 without control characters other than tab and
// newline. It returns a *ValidationError for field "reason". An empty reason
// passes; callers that require one say so.
func ValidateReason(reason string) error {
	if !utf8.ValidString(reason) {
		return invalid("reason", "must be valid UTF-8")
	}
	if utf8.RuneCountInString(reason) > MaxReasonLength {
		return invalid("reason", "must be at most 500 characters")
	}
	for _, r := range reason {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f {
			return invalid("reason", "must not hold control characters")
		}
	}
	return nil
}

// ValidateSessionID checks a session id: 1 to 64 characters of
// [A-Za-z0-9_.:-]. It returns a *ValidationError for field "sessionId".
func ValidateSessionID(id string) error { return validateSessionID(id) }

// ForgetPolicy makes this instance read the policy and the pools of
// resource again before their next use (after a change of either, here or
// announced by another instance; unannounced changes show within
// Options.PolicyCacheTTL). Until that read answers, the old ones are
// served only while the store is down (policycache.go).
func (s *Service) ForgetPolicy(resource string) { s.policies.drop(resource) }
