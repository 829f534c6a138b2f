package quota

import (
	"context"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// ApplyOutcome says what the balance store did with an apply.
type ApplyOutcome int

// Outcomes of BalanceStore.Apply.
const (
	// ApplyGranted: a new reservation was made.
	ApplyGranted ApplyOutcome = iota + 1
	// ApplyReplayed: the session id already had a reservation with the same
	// arguments; the first answer is returned and nothing is charged again.
	ApplyReplayed
	// ApplyExhausted: not enough remains; nothing was changed.
	ApplyExhausted
	// ApplyWrongPeriod: the store's clock (Redis TIME) is outside the period
	// the caller computed; Now says where it is. Nothing was changed.
	ApplyWrongPeriod
	// ApplyNeedBalance: the period's balance (or the resource's limit) is not
	// in the store yet; seed it from the ledger and retry. Nothing was changed.
	ApplyNeedBalance
)

// ApplyCmd is one reservation request to the balance store.
type ApplyCmd struct {
	ResourceName string
	SessionID    string
	ClientID     string
	Amount       int64 // requested, in the policy's unit
	MinAmount    int64 // 0 = all-or-nothing
	Period       Period
	Lease        time.Duration // lease length from now (store clock)
	// FirstPeriod: Period is the policy's first one, which also takes store
	// times before its Start (the policy was created on a clock a little
	// ahead of the store's).
	FirstPeriod bool
	// Pools, when set, makes the apply one of a resource with business
	// lines or temporary grants (internal/pools): the store decides which
	// pools the grant draws from, or why it is refused.
	Pools *PoolsCmd
	// Attempt is a token of this apply request ("" = none): the store keeps
	// it with the reservation it makes, so that Compensate can give back
	// exactly the reservation of an attempt answered with an error, and
	// not one a retry of the same session has since replayed (and
	// recorded). Pools' applies keep it too (apply.lua).
	Attempt string
	// OtherSessionID is the other stored form of the session's id ("" =
	// none; see scope.go): when SessionID holds no session and this one
	// holds one of ClientID (not CANCELLED), the store uses that one (a
	// replay, or ErrSessionConflict) and says so (ApplyResult.OtherForm),
	// in the same atomic step. A new session is always SessionID.
	OtherSessionID string
}

// PoolsCmd is the pools' part of an apply (see internal/pools.ApplyReq).
type PoolsCmd struct {
	Line         string // "" on a resource without lines
	Critical     bool
	Continuation bool
	// NoGrants: the resource has no temporary grant that is not expired
	// (PoolUse.Grants false, as cached): the store need not read them.
	// The zero value reads them.
	NoGrants bool
}

// ApplyResult is the store's answer to an ApplyCmd. For ApplyReplayed the
// fields are those of the first, granted apply.
type ApplyResult struct {
	Outcome   ApplyOutcome
	Granted   int64
	Remaining int64 // after the grant; for ApplyExhausted, what remains
	// LineRemaining: of a grant on a business line, what the line could
	// still be granted after it (its dedicated part, borrowing room, buffer
	// lent and grants it may draw); of a refusal on a line, what it could
	// be granted now; 0 otherwise. Remaining is the resource's, as finish
	// and status answer it (Balance.Remaining: with pools, the grants'
	// room added).
	LineRemaining  int64
	LeaseExpiresAt time.Time
	StartTime      time.Time // session start (store clock)
	PeriodStart    time.Time // the period the session is charged to
	Now            time.Time // store clock when the script ran
	// Pools' applies only: which pools the grant drew from, or why it was
	// refused (ApplyExhausted).
	Drawn  PoolSplit
	Reason pools.Reason
	// Tight: buffer is lent to the line now (its quota is getting tight).
	Tight bool
	// OtherForm: the session replayed is the one under
	// ApplyCmd.OtherSessionID.
	OtherForm bool
	// SpareMove: the spare buffer this apply put into the shared pool
	// (granted or refused), in pools.ParseSpareNote's form; "" when it
	// moved none (most applies). The Service journals it (journalSpare).
	SpareMove string
}

// FinishCmd reports a session's real usage.
type FinishCmd struct {
	ResourceName string
	SessionID    string
	ClientID     string        // the caller's client; "" = any (no API keys)
	Actual       int64         // real usage, in the policy's unit
	Retention    time.Duration // how long the finished session is kept for replays
}

// FinishResult is what a finish did (or, when Replayed, what the first finish
// did). Amounts are in the policy's unit.
type FinishResult struct {
	Replayed    bool
	WasLeaked   bool // the session had been swept; this finish trued it up
	ClientID    string
	Granted     int64
	Charged     int64 // the actual usage, overage included
	Refunded    int64 // granted − actual when positive
	Overage     int64 // actual − granted when positive
	Remaining   int64 // of the session's period, after the finish
	PeriodStart time.Time
	StartTime   time.Time
	EndTime     time.Time
}

// Balance is the state of one period of one resource in the balance store.
type Balance struct {
	Exists         bool // false: not seeded yet for this period
	Limit          int64
	Charged        int64
	Reserved       int64
	ActiveSessions int64 // USING sessions of the resource, any period
	// Pools: the resource has business lines or temporary grants (its
	// period's pool counters are seeded); then GrantsHeld is what the
	// period's sessions hold of grants (counted in Charged or Reserved,
	// not against Limit) and GrantsRoom what the grants in force may still
	// give, every line's (amounts less used).
	Pools      bool
	GrantsHeld int64
	GrantsRoom int64
}

// Remaining is the answers' remainingQuota, in the policy's unit. A plain
// resource: Limit − Charged − Reserved, negative after an overage or after
// the limit was lowered below what is used. With pools (b.Pools), the
// grants' room added: what the limit has left (Limit − Charged − Reserved
// + GrantsHeld, never below 0) plus GrantsRoom, so it is never negative and
// drawing a grant does not take the figure below 0 (docs/pools.md §5).
func (b Balance) Remaining() int64 {
	return RemainingWithGrants(b.Limit-b.Charged-b.Reserved, b.Pools, b.GrantsHeld, b.GrantsRoom)
}

// RemainingWithGrants is Balance.Remaining from the period's limit −
// charged − reserved (period): period itself without pools, else
// max(0, period + held) + room.
func RemainingWithGrants(period int64, pools bool, held, room int64) int64 {
	if !pools {
		return period
	}
	return max(0, period+held) + room
}

// LeakedSession is a session the sweeper moved from USING to LEAKED.
type LeakedSession struct {
	ResourceName string
	SessionID    string
	ClientID     string // who applied for it ("" for sessions swept before it was reported)
	PeriodStart  time.Time
	Granted      int64
	EndTime      time.Time // when it was swept (store clock)
	// Fresh: swept by this call. Otherwise it was swept earlier and its
	// ledger row is not yet known to be LEAKED (see BalanceStore.AckLeaks).
	Fresh bool
}

// The balance store (Redis) keeps live balances and sessions. Every method
// is one atomic step; every mutating one is idempotent by session id, so a
// retried call never charges twice. Its methods are split into the small
// interfaces below, by use; each consumer (the Service here, the sweeper and
// reconciliation in their packages) declares the set it calls, and a fake
// implements only that. internal/redisstore implements them all.

// CompensateOutcome is what Compensate found.
type CompensateOutcome int

// Compensate outcomes.
const (
	// CompensateGivenBack: the attempt's reservation was given back.
	CompensateGivenBack CompensateOutcome = iota + 1
	// CompensateNotItsOwn: the session is settled, cancelled, or was replayed
	// by another attempt: left alone, nothing more to do.
	CompensateNotItsOwn
	// CompensateAbsent: no such session: the attempt's script did not run,
	// or has not run yet (it may still be queued in a paused Redis).
	CompensateAbsent
)

// Reserver makes and gives back reservations (apply).
type Reserver interface {
	// Apply checks and reserves in one step. It returns ErrSessionConflict
	// when the session id exists with other arguments.
	Apply(ctx context.Context, cmd ApplyCmd) (ApplyResult, error)
	// Cancel gives back a reservation whose ledger row could not be written.
	// Cancelling a missing or non-USING session is a no-op.
	Cancel(ctx context.Context, resource, sessionID string) error
	// Compensate gives back the reservation an apply attempt (ApplyCmd.Attempt)
	// made, if the session is still that attempt's alone: USING, and no
	// other apply of the session has replayed it since (a retry that may be
	// writing its row). It leaves a CANCELLED tombstone, as Cancel does; a
	// balance rebuilt since without the session loses nothing. Idempotent.
	Compensate(ctx context.Context, resource, sessionID, attempt string) (CompensateOutcome, error)
	// MarkFailOpen flags a USING session whose ledger row could not be
	// written but which a failMode OPEN policy keeps: reconciliation writes
	// its row instead of giving the reservation back.
	MarkFailOpen(ctx context.Context, resource, sessionID string) error
	// ScopeFailOpen moves client's flagged (MarkFailOpen) session stored
	// under id to the scoped id, its lease and flag with it, and reports
	// whether it is stored there now: false (nothing changed) when the
	// session under id is gone, not flagged or not client's, or a live
	// session holds scoped already.
	ScopeFailOpen(ctx context.Context, resource, id, scoped, client string) (bool, error)
}

// Leases renews and settles sessions (heartbeat, finish).
type Leases interface {
	// Heartbeat extends a USING session's lease to now+lease and returns the
	// new expiry. A clientID other than "" must own the session. Errors:
	// ErrSessionNotFound (also another client's session), *NotActiveError.
	Heartbeat(ctx context.Context, resource, sessionID, clientID string, lease time.Duration) (time.Time, error)
	// Finish settles a session. A cmd.ClientID other than "" must own it.
	// Errors: ErrSessionNotFound (also another client's session),
	// ErrSessionConflict (a repeat with another actual amount).
	Finish(ctx context.Context, cmd FinishCmd) (FinishResult, error)
}

// BalanceReader reads a period's balance.
type BalanceReader interface {
	// Balance reads one period's balance; it never changes anything.
	Balance(ctx context.Context, resource string, period Period) (Balance, error)
}

// Seeder writes what the store lost back from the ledger.
type Seeder interface {
	// SeedFenced writes a period's balance and the resource's limit if they
	// are absent, and brings back the open sessions it is given that the
	// store lost (with a fresh lease). It reports whether it wrote the
	// balance; a balance already there is left as it is, so seeding twice
	// never counts twice. The Service passes the first page of open
	// sessions and, when it wrote the balance, the later pages to
	// RestoreSessions. It writes only while the lock f still holds
	// f.Token (the zero Fence: unfenced), checked in the same atomic step;
	// else it writes nothing and returns ErrLockLost (issue 11 §3.4).
	SeedFenced(ctx context.Context, f Fence, resource string, period Period, limit int64, totals PeriodTotals, open []UsageRecord, lease time.Duration) (bool, error)
	// CatchUp counts, once each, the open ledger rows of period that its
	// balance, rebuilt from a ledger snapshot, does not count (their rows
	// landed after the snapshot), restoring a session the store lost;
	// rows it counts are left alone. Fenced by f. Errors: ErrLockLost.
	CatchUp(ctx context.Context, f Fence, resource string, period Period, open []UsageRecord, lease time.Duration) error
	// RestoreSessions brings back open sessions the store lost, with a fresh
	// lease, leaving the balance as it is; sessions it holds are left alone.
	RestoreSessions(ctx context.Context, resource string, open []UsageRecord, lease time.Duration) error
	// RestoreLeaked brings back a session swept as LEAKED (row, from the
	// ledger: its grant, period and EndTime, when it was swept) that the
	// store lost, so that a late finish can true it up; it is kept until
	// EndTime + retention and not at all when that is past. The balance is
	// left as it is (the grant is in its charged total); a session the
	// store holds is left alone.
	RestoreLeaked(ctx context.Context, resource string, row UsageRecord, retention time.Duration) error
}

// Locker takes and releases named per-resource locks (seeding,
// reconciliation).
type Locker interface {
	// TryLock takes the named lock of a resource for ttl if it is free and
	// returns its token ("" when another holder has it).
	TryLock(ctx context.Context, resource, name string, ttl time.Duration) (string, error)
	// RenewLock extends the lock token holds to ttl from now (taking it
	// again if it expired and is free); false: another holder has it.
	RenewLock(ctx context.Context, resource, name, token string, ttl time.Duration) (bool, error)
	// Unlock releases a lock taken with TryLock if token still holds it.
	Unlock(ctx context.Context, resource, name, token string) error
}

// LimitSetter sets a resource's limit.
type LimitSetter interface {
	// SetLimit sets the resource's limit; it applies to every period at once.
	SetLimit(ctx context.Context, resource string, limit int64) error
}

// BalanceStore is what the Service uses of the balance store.
type BalanceStore interface {
	Reserver
	Leases
	BalanceReader
	Seeder
	Locker
	LimitSetter
}

// SessionState is a session as the BalanceStore holds it. Amounts are in the
// policy's unit.
type SessionState struct {
	Status      Status
	ClientID    string
	Granted     int64
	Actual      int64 // FINISHED only
	Refunded    int64 // FINISHED only
	Overage     int64 // FINISHED only
	PeriodStart time.Time
	StartTime   time.Time
	EndTime     time.Time // FINISHED or LEAKED
	WasLeaked   bool      // FINISHED after a leak
	ApplyAmount int64
	MinAmount   int64
	FailOpen    bool // granted fail-open while the ledger was unreachable: its row is still to be written
	// BusinessLine is the line a pools' session draws for ("" without one).
	BusinessLine string
	// FailOpenDrawn is what a pools' session flagged FailOpen drew at
	// apply (kept by MarkFailOpen: a finish overwrites the session's split
	// with what it stays charged to), for the ledger row reconciliation
	// writes; nil for any other session.
	FailOpenDrawn *PoolSplit
}

// SessionWriter writes ledger rows (apply, finish).
type SessionWriter interface {
	// InsertSession writes a new USING row. Errors: ErrDuplicateSession.
	InsertSession(ctx context.Context, rec UsageRecord) error
	// FinishSession settles a USING or LEAKED row; a FINISHED row is left as is.
	FinishSession(ctx context.Context, rec UsageRecord) error
	// CancelSession marks rec.SessionID's row CANCELLED with nothing charged
	// (charged 0, the grant refunded, end time rec.EndTime), only while it
	// is the USING row rec's apply wrote (same resource, start time, grant
	// and period): an apply answered 503 after an insert whose outcome was
	// unknown (docs/reliability.md G1). A missing or other row is left as it
	// is, without error. Errors: ErrUnavailable.
	CancelSession(ctx context.Context, rec UsageRecord) error
	// ReviveSession makes rec.SessionID's row the USING row of rec's apply
	// (period, grant, start time and pools' draws from rec) when it is a
	// CANCELLED row of the same apply (resource, client, apply and min
	// amounts), or a USING one of it with the same grant and period (its
	// start time is moved to rec's, so that a CancelSession of the earlier
	// attempt no longer matches it). It reports whether the row is now rec's.
	// Errors: ErrUnavailable.
	ReviveSession(ctx context.Context, rec UsageRecord) (bool, error)
}

// SessionReader reads one ledger row.
type SessionReader interface {
	// Session reads one row by session id. Errors: ErrSessionNotFound.
	Session(ctx context.Context, sessionID string) (UsageRecord, error)
}

// PeriodLedger reads what seeding a period's balance needs.
type PeriodLedger interface {
	// PeriodTotals sums a period's rows of one resource.
	PeriodTotals(ctx context.Context, resource string, periodStart time.Time) (PeriodTotals, error)
	// OpenSessionsPage lists at most limit USING rows of a resource, in
	// ledger order after the position after (0: from the start), and the
	// position to pass for the next page (the same position when the page
	// is empty). Seeding and reconciliation walk open sessions with it so
	// that their memory does not grow with their number.
	OpenSessionsPage(ctx context.Context, resource string, after int64, limit int) ([]UsageRecord, int64, error)
}

// SnapshotLedger is what a Ledger may offer besides, for rebuilds that
// catch up with the writes in flight while they read (issue 11, G7).
type SnapshotLedger interface {
	// SeedSnapshot reads a period's totals and every open row of a resource
	// in one consistent snapshot.
	SeedSnapshot(ctx context.Context, resource string, periodStart time.Time) (PeriodTotals, []UsageRecord, error)
	// SessionsByID reads rows by session id; ids without a row are absent.
	SessionsByID(ctx context.Context, ids []string) (map[string]UsageRecord, error)
}

// Ledger is what the Service uses of the durable record of every session
// (MySQL), the source of truth from which balances are rebuilt.
// internal/mysqlstore implements it, and what the sweeper
// (MarkLeaked) and reconciliation (SessionsByID) use besides.
type Ledger interface {
	SessionWriter
	SessionReader
	PeriodLedger
}

// PolicyStore keeps policies (MySQL).
type PolicyStore interface {
	// GetPolicy errors: ErrResourceNotFound.
	GetPolicy(ctx context.Context, resource string) (Policy, error)
	ListPolicies(ctx context.Context) ([]Policy, error)
	// PutPolicy creates or updates; an update keeps CreatedAt. It returns the
	// stored policy and whether it was created.
	PutPolicy(ctx context.Context, p Policy) (Policy, bool, error)
	// CreatePolicy stores p only when its resource has no policy, in one
	// atomic step (of concurrent creates of one name exactly one reports
	// true); false: one exists and nothing was written.
	CreatePolicy(ctx context.Context, p Policy) (Policy, bool, error)
}

// Scheduler turns a policy's resetCron and timezone into periods.
type Scheduler interface {
	// Validate checks a cron expression and IANA timezone.
	Validate(cron, timezone string) error
	// PeriodAt returns the period of p that contains t.
	PeriodAt(p Policy, t time.Time) (Period, error)
}

// ChargeOutcome says what the balance store did with a ChargeCmd.
type ChargeOutcome int

// Outcomes of ChargeStore.Charge.
const (
	// ChargeCharged: the amount was added to the period's charged total.
	ChargeCharged ChargeOutcome = iota + 1
	// ChargeRefused: less than Need remained (nothing, for Need 0);
	// nothing was changed.
	ChargeRefused
	// ChargeWrongPeriod: the store's clock is outside Period; Now says
	// where it is. Nothing was changed.
	ChargeWrongPeriod
	// ChargeNeedBalance: the period's balance (or the limit) is not in the
	// store yet; seed it and retry. Nothing was changed.
	ChargeNeedBalance
)

// ChargeCmd charges an amount with no session: an apply and a finish of
// the same amount in one step.
type ChargeCmd struct {
	ResourceName string
	Amount       int64 // added to charged, 0 … 2^53−1
	// Need is what must remain for the charge to go ahead: −1 never
	// refuses (usage that already happened), 0 refuses when nothing
	// remains, n > 0 refuses when less than n remains.
	Need        int64
	Period      Period
	FirstPeriod bool // see ApplyCmd.FirstPeriod
}

// ChargeResult is the store's answer to a ChargeCmd.
type ChargeResult struct {
	Outcome ChargeOutcome
	Limit   int64
	// Remaining is limit − charged − reserved after the charge (for
	// ChargeRefused, with nothing changed).
	Remaining int64
	// Overage is the part of Amount charged past the limit.
	Overage int64
	Now     time.Time // store clock
	// Set by the Service: the period charged and a full period's length.
	Period       Period
	PeriodLength time.Duration
}

// ChargeStore is the balance store's side of Charge (internal/redisstore).
type ChargeStore interface {
	// Charge checks and charges in one atomic step of one resource.
	Charge(ctx context.Context, cmd ChargeCmd) (ChargeResult, error)
	// Uncharge gives back an amount Charge added to a period (a refusal of
	// another resource of the same request, or a ledger write that
	// failed). A period whose balance is gone is left alone.
	Uncharge(ctx context.Context, resource string, period Period, amount int64) error
}

// ChargeLedger writes the ledger rows of charges (internal/mysqlstore).
type ChargeLedger interface {
	// InsertCharges writes FINISHED rows (one per charged resource of a
	// request) in one statement: all of them or none, durable when it
	// returns nil. A ledger may write the rows of concurrent calls of the
	// same client, resource and period as one row with their sums (the
	// period totals are the same). Errors: ErrDuplicateSession,
	// ErrUnavailable.
	InsertCharges(ctx context.Context, recs []UsageRecord) error
}

// ChargeStores are the stores Service.Charge uses (Options.Charges).
type ChargeStores struct {
	Balances ChargeStore
	Ledger   ChargeLedger
}
