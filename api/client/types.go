package client

import "time"

// QuotaType is the unit a policy counts in.
type QuotaType string

// The quota types a policy may have.
const (
	// QuotaTypeDuration counts seconds of usage time.
	QuotaTypeDuration QuotaType = "DURATION"
	// QuotaTypeCount counts calls.
	QuotaTypeCount QuotaType = "COUNT"
	// QuotaTypeTokens counts tokens (for example of an LLM API).
	QuotaTypeTokens QuotaType = "TOKENS"
	// QuotaTypeBandwidth counts bytes.
	QuotaTypeBandwidth QuotaType = "BANDWIDTH"
)

// MaxAmount is the largest amount the server accepts anywhere: 2^53−1.
const MaxAmount int64 = 1<<53 - 1

// SessionStatusUsing is the status of a live session, as returned by
// Heartbeat. The other statuses, reported in Error.SessionStatus with
// ErrSessionNotActive, are "FINISHED" and "LEAKED".
const SessionStatusUsing = "USING"

// ApplyRequest reserves ApplyAmount of a resource and opens a session
// (POST /quota/apply).
type ApplyRequest struct {
	// ResourceName names the policy to charge; required.
	ResourceName string `json:"resourceName"`
	// ApplyAmount is the amount to reserve, in the policy's unit; 1 … 2^53−1.
	ApplyAmount int64 `json:"applyAmount"`
	// ClientID identifies the calling service in the ledger; optional.
	ClientID string `json:"clientId,omitempty"`
	// SessionID is the idempotency key of the apply; optional, the server
	// generates one when empty. Set it to retry an Apply safely.
	SessionID string `json:"sessionId,omitempty"`
	// MinAmount, when > 0, allows a partial grant of at least MinAmount
	// when ApplyAmount does not fit; 0 means all or nothing.
	MinAmount int64 `json:"minAmount,omitempty"`
	// BusinessLine names the business line to charge on a resource with
	// lines (docs/pools.md): required there, refused (400) elsewhere. An
	// API key bound to a line may only name that one (403); "" with such a
	// key means its line.
	BusinessLine string `json:"businessLine,omitempty"`
	// Critical false marks a preview or debug call, refused first above a
	// line's watermark; nil (not sent) means true.
	Critical *bool `json:"critical,omitempty"`
	// Continuation marks more work for a running conversation or job: a
	// watermark never refuses it, only a line with nothing left does.
	Continuation bool `json:"continuation,omitempty"`
}

// Drawn says which pools a grant came from, in the policy's unit (answers
// on resources with business lines or temporary grants only). The four
// add up to GrantedAmount.
type Drawn struct {
	// Dedicated is what came from the line's own part.
	Dedicated int64 `json:"dedicated"`
	// Shared is what the line borrowed from the shared pool.
	Shared int64 `json:"shared"`
	// Buffer is what came from the buffer lent to the line (elasticity).
	Buffer int64 `json:"buffer"`
	// Grant is what came from temporary grants.
	Grant int64 `json:"grant"`
}

// ApplyResponse is the answer to a granted Apply.
type ApplyResponse struct {
	// SessionID identifies the opened session in Heartbeat and Finish.
	SessionID string `json:"sessionId"`
	// GrantedAmount is the amount reserved, in the policy's unit.
	GrantedAmount int64 `json:"grantedAmount"`
	// RemainingQuota is what remains in the period after the grant (the
	// resource's limit less what is charged and reserved, as Finish and
	// Status answer it), also for a grant on a business line.
	RemainingQuota int64 `json:"remainingQuota"`
	// LineRemaining, for a grant on a business line, is what the line's
	// next apply of the same kind could still be granted after it (its
	// dedicated part, what it may borrow from the shared pool, buffer lent
	// to it, temporary grants it may draw; 0 when its watermark would
	// refuse that apply); nil otherwise (no line, fail-open, older servers).
	LineRemaining *int64 `json:"lineRemaining,omitempty"`
	// LeaseExpiresAt is when the session is considered leaked unless it is
	// heartbeated or finished first (UTC).
	LeaseExpiresAt time.Time `json:"leaseExpiresAt"`
	// HeartbeatIntervalSeconds is how often to call Heartbeat, in seconds.
	HeartbeatIntervalSeconds int64 `json:"heartbeatIntervalSeconds"`
	// FailOpen is true when a failMode OPEN policy granted this apply while
	// the center could not decide; RemainingQuota is then -1 (unknown).
	FailOpen bool `json:"failOpen,omitempty"`
	// Drawn is where the grant came from; nil on a resource without
	// business lines or temporary grants.
	Drawn *Drawn `json:"drawn,omitempty"`
	// QuotaTight is true while buffer is lent to the business line (the
	// elasticity saw its quota getting tight): degrade non-critical work.
	QuotaTight bool `json:"quotaTight,omitempty"`
	// PolicyVersion is an opaque token that changes when the resource's
	// limit changes, its period resets, or a grant or line of its pool
	// changes; compare it for equality only. "" from older servers.
	PolicyVersion string `json:"policyVersion,omitempty"`
}

// HeartbeatRequest extends the lease of a session (POST /quota/heartbeat).
type HeartbeatRequest struct {
	// ResourceName is the resource the session was applied on.
	ResourceName string `json:"resourceName"`
	// SessionID is the session to keep alive.
	SessionID string `json:"sessionId"`
	// ClientID is the clientId the session was applied with: session ids
	// are scoped to their client. With API keys the server takes the key's
	// (this must then be empty or the same); without them it must be the
	// apply's (empty: a session applied without one). Lease sets it.
	ClientID string `json:"clientId,omitempty"`
}

// HeartbeatResponse is the answer to a successful Heartbeat.
type HeartbeatResponse struct {
	// SessionID echoes the request.
	SessionID string `json:"sessionId"`
	// Status is always "USING" (SessionStatusUsing) on success.
	Status string `json:"status"`
	// LeaseExpiresAt is the new lease expiry (UTC).
	LeaseExpiresAt time.Time `json:"leaseExpiresAt"`
	// PolicyVersion is as in ApplyResponse: a LocalPool whose batch was
	// granted under another version returns it and fetches a fresh one.
	PolicyVersion string `json:"policyVersion,omitempty"`
}

// FinishRequest closes a session with its real usage (POST /quota/finish).
type FinishRequest struct {
	// ResourceName is the resource the session was applied on.
	ResourceName string `json:"resourceName"`
	// SessionID is the session to settle.
	SessionID string `json:"sessionId"`
	// ClientID: as HeartbeatRequest's.
	ClientID string `json:"clientId,omitempty"`
	// ActualUsedAmount is the real usage in the policy's unit, 0 … 2^53−1.
	// It may exceed the granted amount (an overage, charged in full).
	ActualUsedAmount int64 `json:"actualUsedAmount"`
}

// FinishResponse is the settlement of a session. Amounts are in the policy's
// unit.
type FinishResponse struct {
	// SessionID echoes the request.
	SessionID string `json:"sessionId"`
	// GrantedAmount is what the Apply reserved.
	GrantedAmount int64 `json:"grantedAmount"`
	// ChargedAmount is what was charged: the actual usage, overage included.
	ChargedAmount int64 `json:"chargedAmount"`
	// RefundedAmount is granted − actual when positive, else 0.
	RefundedAmount int64 `json:"refundedAmount"`
	// OverageAmount is actual − granted when positive, else 0.
	OverageAmount int64 `json:"overageAmount"`
	// RemainingQuota is what remains in the session's period afterwards;
	// it may be negative after an overage.
	RemainingQuota int64 `json:"remainingQuota"`
}

// QuotaStatus is the balance of a resource in its current period
// (GET /quota/status). Amounts are in the policy's unit.
type QuotaStatus struct {
	// ResourceName echoes the request.
	ResourceName string `json:"resourceName"`
	// QuotaType is the policy's unit.
	QuotaType QuotaType `json:"quotaType"`
	// TotalLimit is the policy's limit per period.
	TotalLimit int64 `json:"totalLimit"`
	// UsedAmount is what finished (and leaked) sessions charged this period.
	UsedAmount int64 `json:"usedAmount"`
	// ReservedAmount is what live (USING) sessions hold this period.
	ReservedAmount int64 `json:"reservedAmount"`
	// RemainingQuota is TotalLimit − UsedAmount − ReservedAmount; it may be
	// negative after an overage or a lowered limit.
	RemainingQuota int64 `json:"remainingQuota"`
	// ActiveSessions is the number of USING sessions of the resource.
	ActiveSessions int64 `json:"activeSessions"`
	// PeriodStart is when the current period began (UTC).
	PeriodStart time.Time `json:"periodStart"`
	// NextResetAt is when the next period begins, or nil when the policy
	// never resets.
	NextResetAt *time.Time `json:"nextResetAt"`
	// BurnRate is consumption (used + reserved) per second over the last 5
	// minutes of this period, in the policy's unit; nil while unknown.
	BurnRate *float64 `json:"burnRate"`
	// ExhaustsAt is when RemainingQuota reaches 0 at BurnRate; nil when the
	// budget lasts past the next reset (or nothing is consumed).
	ExhaustsAt *time.Time `json:"exhaustsAt"`
	// Pools is the resource's pools (business lines, temporary grants);
	// nil for a resource without either.
	Pools *PoolStatus `json:"pools,omitempty"`
}

// PolicySpec creates or replaces the policy of a resource
// (PUT /admin/policies/{resourceName}).
type PolicySpec struct {
	// ResourceName is the resource; it goes in the URL path, not the body.
	// 1 to 64 characters of [a-z0-9_.-].
	ResourceName string `json:"-"`
	// QuotaType is the unit; required.
	QuotaType QuotaType `json:"quotaType"`
	// TotalLimit is the limit per period in that unit; 1 … 2^53−1.
	TotalLimit int64 `json:"totalLimit"`
	// ResetCron is a cron expression giving the period starts; "" means the
	// quota never resets. It is always sent.
	ResetCron string `json:"resetCron"`
	// Timezone is the IANA zone ResetCron is read in; "" lets the server
	// use its default (UTC).
	Timezone string `json:"timezone,omitempty"`
	// LeakThresholdSeconds is how long a session may go without heartbeat
	// before it is swept as leaked, in seconds; 0 lets the server use its
	// default (300).
	LeakThresholdSeconds int64 `json:"leakThresholdSeconds,omitempty"`
	// FailMode is CLOSED (default: refuse with 503 when the center cannot
	// decide) or OPEN (grant anyway and reconcile later).
	FailMode string `json:"failMode,omitempty"`
	// Pools, when set, are the resource's pool settings, written with the
	// policy (as PUT …/pools); nil leaves them as they are. A limit or
	// settings the lines' explicit dedicated amounts do not fit is
	// ErrInvalidArgument naming totalLimit or pools.
	Pools *PoolSettings `json:"pools,omitempty"`
}

// Policy is a stored policy as the admin endpoints return it.
type Policy struct {
	// ResourceName is the resource the policy governs.
	ResourceName string `json:"resourceName"`
	// QuotaType is the unit.
	QuotaType QuotaType `json:"quotaType"`
	// TotalLimit is the limit per period in that unit.
	TotalLimit int64 `json:"totalLimit"`
	// ResetCron is the reset schedule; "" means never.
	ResetCron string `json:"resetCron"`
	// Timezone is the IANA zone of ResetCron.
	Timezone string `json:"timezone"`
	// LeakThresholdSeconds is the lease length, in seconds.
	LeakThresholdSeconds int64 `json:"leakThresholdSeconds"`
	// FailMode is CLOSED or OPEN.
	FailMode string `json:"failMode"`
	// CreatedAt is when the policy was first created (UTC).
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is when it was last changed (UTC).
	UpdatedAt time.Time `json:"updatedAt"`
	// Pools are the pool settings, in the answer of a PUT or PATCH that set
	// them (nil otherwise).
	Pools *PoolSettings `json:"pools,omitempty"`
	// Created is set by PutPolicy when the server answered 201 Created
	// rather than 200 (an update). It is not part of the JSON.
	Created bool `json:"-"`
}

// Health is the body of GET /healthz and GET /readyz.
type Health struct {
	// Status is "ok" (healthz), "ready" or "not ready" (readyz).
	Status string `json:"status"`
}
