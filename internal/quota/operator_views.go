package quota

import "time"

// This file holds what the operators' surface (internal/admin) reads from
// the stores: live sessions from the BalanceStore (Redis), session history
// and usage sums from the Ledger (MySQL), and burn-rate samples. The stores
// implement the reads; internal/admin declares the interfaces it uses.

// LiveSession is a USING session as Redis holds it. Amounts are in the
// policy's unit; times are UTC at millisecond precision.
type LiveSession struct {
	SessionID      string
	ClientID       string
	Granted        int64
	PeriodStart    time.Time
	StartTime      time.Time
	LeaseExpiresAt time.Time // last heartbeat (or the apply) + leakThresholdSeconds
	FailOpen       bool      // granted fail-open; its ledger row is still to be written
	BusinessLine   string    // the pools' line it draws for; "" without one
	Pos            LivePos   // the position just after this session in the lease index
}

// LivePos is a position in a resource's lease index, walked from the latest
// lease expiry down: entries with a lease at or below LeaseMs, skipping the
// first Skip of those at exactly LeaseMs (already returned). The zero value
// is the top.
type LivePos struct {
	LeaseMs int64
	Skip    int
}

// HistoryPos is a position in a resource's ledger rows walked from the latest
// start down: rows that started before StartMs, or at StartMs with an id
// below ID. The zero value is the top.
type HistoryPos struct {
	StartMs int64
	ID      int64
}

// HistoryQuery selects ledger rows of one resource, the latest started
// first. It examines at most Scan rows after Before, whatever the filters,
// so its cost is bounded; a page may then hold fewer than Limit rows and
// still have More.
type HistoryQuery struct {
	Resource string
	Statuses []Status // empty: any
	ClientID string   // "": any
	Line     string   // business line; "": any
	Before   HistoryPos
	Limit    int // rows returned at most, ≥ 1
	Scan     int // rows examined at most, ≥ Limit
}

// HistoryRow is a ledger row with its position.
type HistoryRow struct {
	UsageRecord
	Pos HistoryPos
}

// HistoryPage is one page of a HistoryQuery: Next is where the following
// page starts (the last row examined); More says whether rows may remain.
type HistoryPage struct {
	Rows []HistoryRow
	Next HistoryPos
	More bool
}

// Usage groupings of a UsageQuery.
const (
	GroupByClient = "client"
	GroupByLine   = "line" // the business line (pools); "" for sessions without one
	GroupByHour   = "hour"
	GroupByDay    = "day"
)

// UsageQuery sums the ledger rows of one resource whose session started in
// [From, To), per group: per client id, per business line, or per UTC hour
// or day of the start.
// At most MaxGroups groups are returned (Truncated says there were more).
type UsageQuery struct {
	Resource  string
	From, To  time.Time
	GroupBy   string
	MaxGroups int
}

// UsageGroup is one group's sums. Amounts are in the policy's unit.
// Charged counts settled sessions only (FINISHED: the actual usage, overage
// included; LEAKED: the grant); Reserved is the grants of sessions still
// USING. Leaked counts sessions that leaked, also those trued up by a late
// finish.
type UsageGroup struct {
	Key      string    // the client id (GroupByClient) or business line (GroupByLine)
	Start    time.Time // the bucket's start (GroupByHour, GroupByDay)
	Sessions int64
	Open     int64
	Granted  int64
	Charged  int64
	Reserved int64
	Refunded int64
	Overage  int64
	Leaked   int64
}

// UsageResult is a UsageQuery's answer, groups in key order.
type UsageResult struct {
	Groups    []UsageGroup
	Truncated bool
}

// BurnSample is what a period had consumed (charged + reserved, in the
// policy's unit) at a moment; the burn rate is the slope between samples.
type BurnSample struct {
	At          time.Time
	PeriodStart time.Time
	Consumed    int64
}
