package quota

import (
	"strings"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// QuotaType is the unit a policy counts in.
type QuotaType string

// The quota types of the main design: usage time, calls, tokens, bytes.
const (
	TypeDuration  QuotaType = "DURATION"  // seconds of usage time
	TypeCount     QuotaType = "COUNT"     // calls
	TypeTokens    QuotaType = "TOKENS"    // tokens
	TypeBandwidth QuotaType = "BANDWIDTH" // bytes
)

// Unit returns the base unit of the type as used in metric names and docs:
// "seconds", "calls", "tokens" or "bytes".
func (t QuotaType) Unit() string {
	switch t {
	case TypeDuration:
		return "seconds"
	case TypeCount:
		return "calls"
	case TypeTokens:
		return "tokens"
	case TypeBandwidth:
		return "bytes"
	}
	return ""
}

// QuotaTypes are the four known types.
var QuotaTypes = []QuotaType{TypeDuration, TypeCount, TypeTokens, TypeBandwidth}

// Units returns the base unit of every known type, in the order of
// QuotaTypes: "seconds", "calls", "tokens", "bytes" (as metric names spell
// them). The slice is the caller's.
func Units() []string {
	us := make([]string, len(QuotaTypes))
	for i, t := range QuotaTypes {
		us[i] = t.Unit()
	}
	return us
}

// Valid reports whether t is one of the four known types.
func (t QuotaType) Valid() bool { return t.Unit() != "" }

// FailMode says what apply does when the center cannot decide (Redis or
// MySQL unavailable, or a circuit breaker open).
type FailMode string

// Fail modes. CLOSED refuses with 503: nothing is ever granted that was not
// counted. OPEN grants the request anyway, records the session in the ledger
// if MySQL is reachable (reconciliation then puts it in the Redis balance)
// and counts it in quota_fail_open_grants_total: callers keep working during
// an outage, at the risk of going over the limit by what they use meanwhile
// (and, when MySQL is down too, of that use not being counted at all).
const (
	FailClosed FailMode = "CLOSED"
	FailOpen   FailMode = "OPEN"
)

// OrDefault returns m, or CLOSED when m is empty.
func (m FailMode) OrDefault() FailMode {
	if m == "" {
		return FailClosed
	}
	return m
}

// MaxAmount is the largest amount, limit or usage accepted anywhere:
// 2^53−1, the largest integer that JSON clients (and Redis Lua numbers)
// represent exactly.
const MaxAmount int64 = 1<<53 - 1

// DefaultLeakThresholdSeconds is how long a session may go without a
// heartbeat before the sweeper marks it LEAKED (main design: 300 s).
const DefaultLeakThresholdSeconds = 300

// MaxLeakThresholdSeconds bounds leakThresholdSeconds (7 days).
const MaxLeakThresholdSeconds = 7 * 24 * 3600

// resourceNameChars: a resource name is 1 to 64 of these.
var resourceNameChars = newCharset(lowerLetters + digits + "_.-")

// alnum is what a resource name must hold at least one of: ".", ".." and
// names of only "_.-" are refused (issue 11 §3.6; "." and ".." are path
// segments that reach the API only through non-normalised URLs).
const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"

// Policy is the quota rule of one resource: how much of what may be used in
// each period. The first period starts at CreatedAt; later ones start at the
// fire times of ResetCron in Timezone.
type Policy struct {
	ResourceName         string    `json:"resourceName"`
	QuotaType            QuotaType `json:"quotaType"`
	TotalLimit           int64     `json:"totalLimit"`           // in the type's unit
	ResetCron            string    `json:"resetCron"`            // "" = never resets
	Timezone             string    `json:"timezone"`             // IANA name, default UTC
	LeakThresholdSeconds int64     `json:"leakThresholdSeconds"` // seconds
	FailMode             FailMode  `json:"failMode"`             // CLOSED (default) or OPEN
	CreatedAt            time.Time `json:"createdAt"`
	UpdatedAt            time.Time `json:"updatedAt"`
	// ResetAt is when an operator last started a new period by hand (POST
	// /admin/policies/{r}/reset); zero if never. See PeriodAnchor.
	ResetAt time.Time `json:"-"`
	// Pools, when not nil, are pool settings to store with the policy, in
	// the same transaction, when PutPolicy updates a stored policy
	// (PoolConfig.UpdatePolicyLocked: checked with the lines against the
	// new limit, and stored with it or not at all); a create stores the
	// policy alone. Never set on a policy read from a store.
	Pools *pools.Settings `json:"-"`
}

// SameSettings reports whether p and q have the same settings, the fields a
// PUT sets: quotaType, totalLimit, resetCron, timezone, leakThresholdSeconds
// and failMode (an empty FailMode counts as CLOSED). The name, the times and
// ResetAt are not compared. A PUT of the same settings changes nothing.
func (p Policy) SameSettings(q Policy) bool {
	return p.QuotaType == q.QuotaType && p.TotalLimit == q.TotalLimit && p.ResetCron == q.ResetCron &&
		p.Timezone == q.Timezone && p.LeakThresholdSeconds == q.LeakThresholdSeconds &&
		p.FailMode.OrDefault() == q.FailMode.OrDefault()
}

// LeaseDuration is how long one heartbeat (or the apply) keeps a session alive.
func (p Policy) LeaseDuration() time.Duration {
	return time.Duration(p.LeakThresholdSeconds) * time.Second
}

// HeartbeatIntervalSeconds is the interval clients are told to heartbeat at:
// a third of the leak threshold, so two heartbeats may be lost before a
// session is swept. At least 1 second.
func (p Policy) HeartbeatIntervalSeconds() int64 {
	if s := p.LeakThresholdSeconds / 3; s > 0 {
		return s
	}
	return 1
}

// ValidateResourceName checks a resource name: [a-z0-9_.-], 1 to 64 bytes,
// at least one of them a letter or digit. It returns a *ValidationError for field "resourceName".
func ValidateResourceName(name string) error {
	if name == "" {
		return invalid("resourceName", "is required")
	}
	if !resourceNameChars.matches(name, 64) || !strings.ContainsAny(name, alnum) {
		return invalid("resourceName", "must be 1 to 64 characters of [a-z0-9_.-] with at least one letter or digit")
	}
	return nil
}

// ValidateAmount checks that v is an integer amount within 1 … 2^53−1
// (or 0 … 2^53−1 when zeroOK).
func ValidateAmount(field string, v int64, zeroOK bool) error {
	// ifs, not a switch: gremlins cannot see a switch's cases run (its
	// coverage has no block for them; docs/mutation.md).
	if v < 0 {
		return invalid(field, "must not be negative")
	}
	if v == 0 && !zeroOK {
		return invalid(field, "must be at least 1")
	}
	if v > MaxAmount {
		return invalid(field, "must be at most 2^53-1")
	}
	return nil
}
