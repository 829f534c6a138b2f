package pools

// GrantKind says whether a grant record is a temporary grant (extra quota)
// or a buffer release (part of the buffer lent until expiry).
type GrantKind string

// Kinds of grant records.
const (
	KindGrant   GrantKind = "GRANT"
	KindRelease GrantKind = "RELEASE"
)

// GrantRecord is a temporary grant or buffer release as the policy store
// keeps it. Times are Unix ms; VoidedMs 0 = not voided.
type GrantRecord struct {
	Grant
	Kind      GrantKind `json:"kind"`
	Reason    string    `json:"reason"`
	CreatedMs int64     `json:"createdAtMs"`
	VoidedMs  int64     `json:"voidedAtMs,omitempty"`
}

// PoolEvent is a controller's or operator's pool decision as recorded.
type PoolEvent struct {
	ID       int64  `json:"id"`
	Resource string `json:"resourceName"`
	Event
}
