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
	// Held, of a buffer release in force, is what its line (or the shared
	// pool) still holds of it now, in the policy's unit (ReleasesHeld): a
	// spare move of an apply lends on what the line does not hold, so it
	// may be less than Amount. Read from the live layout when listed, not
	// stored (nor in audit entries); 0 for grants and voided releases.
	Held int64 `json:"-"`
}

// PoolEvent is a controller's or operator's pool decision as recorded.
type PoolEvent struct {
	ID       int64  `json:"id"`
	Resource string `json:"resourceName"`
	Event
}

// Totals is what the sessions of one period of a resource hold of each
// pool, rebuilt from the ledger to seed the period's pool counters after
// Redis lost them: the finished sessions summed per line (what stays
// charged: Settle), and the open ones (USING, LEAKED) one by one with their
// whole draw, so that the seed can take, for a session that finished or
// was cancelled in Redis after the ledger was read, what Redis settled it
// to instead (pool_seed.lua).
type Totals struct {
	Settled map[string]Drawn // by line ("" = a resource without lines)
	Open    []OpenDraw
}

// OpenDraw is one open session's draw as the ledger holds it.
type OpenDraw struct {
	SessionID string
	Line      string
	Drawn     Drawn
}

// ByLine sums Settled and Open per line, as if no session changed since
// the ledger was read.
func (t Totals) ByLine() map[string]Drawn {
	out := map[string]Drawn{}
	add := func(line string, d Drawn) {
		s := out[line]
		s.Dedicated += d.Dedicated
		s.Shared += d.Shared
		s.Buffer += d.Buffer
		s.Grant += d.Grant
		s.Base += d.Base
		out[line] = s
	}
	for l, d := range t.Settled {
		add(l, d)
	}
	for _, o := range t.Open {
		add(o.Line, o.Drawn)
	}
	return out
}

// GrantUse is what sessions hold of each temporary grant, rebuilt from the
// ledger to restore the grants after Redis lost them: the finished
// sessions' part summed per grant id (what stays charged: Settle), and the
// open sessions (USING, LEAKED) holding part of a grant one by one with
// their whole draw, which the restore checks against Redis as the pool
// counters' seed checks Totals.Open (pool_grants.lua).
type GrantUse struct {
	Settled map[string]int64
	Open    []OpenDraw
}

// State is a resource's pools as one change of them is checked against:
// its limit, pool settings, lines (by name) and the grants and releases
// not yet expired, all read in the transaction that writes the change,
// under the lock of the resource's policy row (mysqlstore.Store.ChangePools),
// so that two changes never both pass a check that only one of them may.
type State struct {
	Limit    int64
	Settings Settings
	Lines    []LineSpec
	Grants   []GrantRecord
	// OpenSessions counts a line's open sessions in the ledger, read in
	// the same transaction (a line's DELETE refuses a line that has any);
	// nil where the store cannot read them so (quota's own checks).
	OpenSessions func(line string) (int64, error)
}

// Change is one write to a resource's pools, decided on a State: exactly
// one of its members is set. PutLine creates or replaces a line,
// DeleteLine removes one (by name), Settings replaces the pool settings,
// Grant records a grant or release, VoidGrant voids one (by id, at the
// change's time; ErrUnknownGrant when it is not there unvoided).
type Change struct {
	PutLine    *LineSpec
	DeleteLine string
	Settings   *Settings
	Grant      *GrantRecord
	VoidGrant  string
	// Events are pool events journalled in the change's transaction (a
	// line's tier change: its WATERMARK_TIER event), with it or not at all.
	Events []Event
}
