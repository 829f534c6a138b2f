package quota

import "time"

// Status is the state of a session in the ledger and in Redis.
type Status string

// Session states: USING while leased, FINISHED after a finish, LEAKED when
// the sweeper found its lease expired (its whole grant stays charged until a
// late finish trues it up).
const (
	StatusUsing    Status = "USING"
	StatusFinished Status = "FINISHED"
	StatusLeaked   Status = "LEAKED"
	// StatusCancelled: a reservation given back because its ledger row
	// could not be written, or its outcome was unknown (the apply answered
	// 503). In Redis it is a tombstone; in the ledger a row that landed
	// after all, settled with nothing charged (Ledger.CancelSession). A
	// retry of the same apply starts afresh (Ledger.ReviveSession); a
	// heartbeat or finish of it is answered ErrSessionNotFound.
	StatusCancelled Status = "CANCELLED"
)

// Period is one accounting window of a policy: [Start, End). End is the zero
// time when the policy never resets.
type Period struct {
	Start time.Time
	End   time.Time
}

// ID is the period's key in Redis and the ledger: its start in Unix
// milliseconds.
func (p Period) ID() int64 { return p.Start.UnixMilli() }

// EndMillis is End in Unix milliseconds, or 0 for a period that never ends.
func (p Period) EndMillis() int64 {
	if p.End.IsZero() {
		return 0
	}
	return p.End.UnixMilli()
}

// Contains reports whether t falls in [Start, End).
func (p Period) Contains(t time.Time) bool {
	return !t.Before(p.Start) && (p.End.IsZero() || t.Before(p.End))
}

// UsageRecord is one ledger row: one session from apply to finish or leak.
// Amounts are in the policy's unit; times are UTC.
type UsageRecord struct {
	ResourceName   string
	ClientID       string
	SessionID      string
	PeriodStart    time.Time
	ApplyAmount    int64
	MinAmount      int64
	GrantedAmount  int64
	ChargedAmount  int64 // granted while USING or LEAKED (reserved or charged), actual once FINISHED
	RefundedAmount int64
	OverageAmount  int64
	StartTime      time.Time
	EndTime        time.Time // zero while USING
	Status         Status
	LeakRecovered  bool // a LEAKED session later trued up by a finish
	// BusinessLine and Drawn: a pools' session's line and which pools its
	// grant drew from at apply (what it stays charged to after a finish is
	// pools.Settle of it).
	BusinessLine string
	Drawn        PoolSplit
}

// PeriodTotals are a period's sums in the ledger: Charged counts FINISHED and
// LEAKED sessions, Reserved the grants of USING sessions.
type PeriodTotals struct {
	Charged  int64
	Reserved int64
}
