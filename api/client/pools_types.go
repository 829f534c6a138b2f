package client

import "time"

// PoolSettings are a resource's pool settings (business lines, seed 003):
// how its limit is cut into the shared pool, the lines' dedicated parts and
// the buffer (the reserve), how far a line may borrow, and how the
// controller moves quota. Percentages are whole numbers; the three shares
// sum to 100. Every field is sent as it is: start from DefaultPoolSettings
// and change what you need.
type PoolSettings struct {
	// SharedPercent is the shared pool's share of the limit (default 60).
	SharedPercent int64 `json:"sharedPercent"`
	// DedicatedPercent is what the lines' dedicated parts share (default 30).
	DedicatedPercent int64 `json:"dedicatedPercent"`
	// BufferPercent is the reserve's share (default 10).
	BufferPercent int64 `json:"bufferPercent"`
	// BorrowLimitPercent is how much of the shared pool a line may hold, as
	// a percentage of its dedicated part: 0 … 1000 (default 50).
	BorrowLimitPercent int64 `json:"borrowLimitPercent"`
	// Elasticity is AUTO (default), PREDICTIVE, REACTIVE or OFF (no
	// automatic move at all).
	Elasticity string `json:"elasticity"`
	// ReclaimThresholdPercent: when the shared pool is this full, 1 … 100
	// (default 90), the controller puts the buffer lines do not hold into
	// the shared pool; reclaims start when a line is under pressure
	// (docs/pools.md §2).
	ReclaimThresholdPercent int64 `json:"reclaimThresholdPercent"`
	// ReclaimConfirmSeconds confirms a warned reclaim after this many
	// seconds, 0 … 86400; 0 = by hand only (default 30).
	ReclaimConfirmSeconds int64 `json:"reclaimConfirmSeconds"`
	// ReclaimDryRun records reclaims without moving anything.
	ReclaimDryRun bool `json:"reclaimDryRun"`
}

// DefaultPoolSettings are the server's defaults (seed 003).
func DefaultPoolSettings() PoolSettings {
	return PoolSettings{SharedPercent: 60, DedicatedPercent: 30, BufferPercent: 10, BorrowLimitPercent: 50,
		Elasticity: "AUTO", ReclaimThresholdPercent: 90, ReclaimConfirmSeconds: 30}
}

// PoolStatus is GET /quota/status's "pools": a resource's pools now, present
// when it has business lines or temporary grants. Amounts are in the
// policy's unit, for the current period.
type PoolStatus struct {
	// Shared is the shared pool's size (its layout; SharedBuffer comes on top).
	Shared int64 `json:"shared"`
	// SharedUsed is what the lines hold of the shared pool.
	SharedUsed int64 `json:"sharedUsed"`
	// SharedBuffer is buffer released to the shared pool.
	SharedBuffer int64 `json:"sharedBuffer"`
	// Buffer is the reserve's size.
	Buffer int64 `json:"buffer"`
	// BufferFree is the reserve lent to no line and not to the shared pool.
	BufferFree int64 `json:"bufferFree"`
	// Elasticity is the settings' mode: AUTO, PREDICTIVE, REACTIVE or OFF.
	Elasticity string `json:"elasticity"`
	// Lines are the business lines, in the layout's order.
	Lines []LineStatus `json:"lines"`
	// Grants are the temporary grants and buffer releases in force.
	Grants []PoolGrant `json:"grants"`
}

// LineStatus is one business line in PoolStatus.
type LineStatus struct {
	BusinessLine string `json:"businessLine"`
	// Tier is CORE, GROWTH or EXPLORE.
	Tier string `json:"tier"`
	// Dedicated is its dedicated part now: its layout's, less what reclaims
	// moved away, plus what they moved to it.
	Dedicated int64 `json:"dedicated"`
	// Used is what it holds this period (reserved + charged), grants included.
	Used int64 `json:"used"`
	// Reserved is what its open sessions hold (part of Used).
	Reserved int64 `json:"reserved"`
	// Borrowed is what it holds of the shared pool: up to BorrowLimit, or
	// more while half of the free shared pool is larger (see MayUse).
	Borrowed    int64 `json:"borrowed"`
	BorrowLimit int64 `json:"borrowLimit"`
	// Lent is what reclaims moved away of its dedicated part; Reclaimed what
	// they moved to it.
	Lent      int64 `json:"lent"`
	Reclaimed int64 `json:"reclaimed"`
	// Buffer is the reserve lent to it.
	Buffer int64 `json:"buffer"`
	// MayUse is what it could hold now, grants aside: Dedicated + Buffer +
	// Borrowed + what it may still borrow (the larger of BorrowLimit left
	// and half of the free shared pool); WatermarkPercent is a percentage
	// of it.
	MayUse int64 `json:"mayUse"`
	// WatermarkPercent is its reject watermark now (95, 80, 60 for CORE,
	// GROWTH, EXPLORE, as the controller moved it).
	WatermarkPercent float64 `json:"watermarkPercent"`
	// ElasticityMode is PREDICTIVE, REACTIVE or OFF: the one the settings
	// pin or, under AUTO, the one the controller chose.
	ElasticityMode string `json:"elasticityMode"`
}

// PoolGrant is a temporary grant (Kind GRANT: extra quota) or a buffer
// release (RELEASE: part of the reserve lent) as the server answers it.
type PoolGrant struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// BusinessLine is the line it is for; "" = every line (a grant) or the
	// shared pool (a release).
	BusinessLine string `json:"businessLine,omitempty"`
	Amount       int64  `json:"amount"`
	// Used is what sessions hold of it (reserved or charged).
	Used        int64     `json:"used"`
	EffectiveAt time.Time `json:"effectiveAt"`
	// ExpiresAt is nil for a release that lasts until it is returned.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Reason    string     `json:"reason"`
	CreatedAt time.Time  `json:"createdAt"`
	VoidedAt  *time.Time `json:"voidedAt,omitempty"`
	// Active: it may be drawn now.
	Active bool `json:"active"`
	// Held, of a buffer release (nil for a grant), is what its line (or
	// the shared pool) still holds of it now: below Amount once an apply's
	// spare move lent the rest on into the shared pool; 0 once voided.
	Held *int64 `json:"held,omitempty"`
}

// VoidedGrant is the answer to a void (VoidGrantReturning).
type VoidedGrant struct {
	// Kind is GRANT or RELEASE; "" when it had expired meanwhile.
	Kind string `json:"kind,omitempty"`
	// Returned, of a release (nil for a grant), is the buffer the void
	// gave back: at most what its line still held of it.
	Returned *int64 `json:"returned,omitempty"`
}
