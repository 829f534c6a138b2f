package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"golang.org/x/sync/singleflight"
)

// Options tune a Service. Zero values take the documented defaults.
type Options struct {
	// PolicyCacheTTL is how long a policy read from the PolicyStore (and a
	// resource's PoolUse) is reused before a read in the background
	// refreshes it (default 2s; policycache.go). Limits are read from the BalanceStore on every apply, so
	// a limit change applies at once whatever this is; the cron, timezone and
	// leak threshold of a changed policy reach other instances within it.
	PolicyCacheTTL time.Duration
	// FinishedRetention is how long a finished or leaked session is kept in
	// the BalanceStore to answer repeats cheaply (default 24h); after it the
	// ledger answers them.
	FinishedRetention time.Duration
	// Now is the local clock (default time.Now): it picks the likely period
	// (the BalanceStore's clock decides), stamps policies and fail-open
	// grants, and times the policy cache and the wait for another
	// instance's seeding.
	Now func() time.Time
	// NewSessionID makes server-side session ids (default: 32 hex chars).
	NewSessionID func() string
	// Audit, when set, records every policy change (PutPolicy); nil records
	// nothing.
	Audit AuditLog
	// Breakers guard the calls to the two backends; nil ones let every
	// call through.
	Breakers Breakers
	// Pools, when its Config is set, are the pools' parts of the stores:
	// which resources use business lines or temporary grants
	// (internal/pools), read into the policy cache, and what the seed step
	// writes back to the balance store (poolstore.go). Config nil: no
	// resource does.
	Pools PoolStores
	// Charges, when set, lets Charge (session-less apply-and-finish, for
	// gateways) run; without them it fails.
	Charges ChargeStores
	// CatchUpAfter is how long after a rebuild of a balance from a ledger
	// snapshot the Service reads the ledger again to catch up with the
	// writes that were in flight (catchup.go; default 5s, negative: never).
	CatchUpAfter time.Duration
	// OnCatchUp, when set, hears every catch-up end: its resource and its
	// error (nil when it succeeded; after a failure the next
	// reconciliation repairs what it would have).
	OnCatchUp func(resource string, err error)
	// CatchUpConcurrency is how many catch-ups run at once in this
	// Service (default 4, catchUpSlots); the others wait their turn, one
	// per resource and period (catchup.go; issue 23 §1).
	CatchUpConcurrency int
	// GlobalSessionIDs: new sessions are stored under their bare id, one
	// namespace for all clients, as before session ids were scoped
	// (QC_GLOBAL_SESSION_IDS, for a rolling upgrade; see scope.go). Both
	// forms are looked up either way.
	GlobalSessionIDs bool
	// CloseMarksWait bounds how long Close waits for the CANCELLED marks
	// still to be made (cancelled.go: the ledger was unreachable) while it
	// retries them every 50 ms, so that a ledger back within it loses none
	// (default 3s; negative: Close does not wait).
	CloseMarksWait time.Duration
	// LedgerTimeout is the deadline of each Ledger and PolicyStore call on
	// the request path (apply, heartbeat, finish, charge, status), and the
	// longest such a request waits for a policy or pool read the policy
	// cache cannot serve (default 2s, mysqlstore's own default; issue 22
	// §5). A resource's cached policy and pools are served without waiting,
	// stale while they are read again (policycache.go).
	LedgerTimeout time.Duration
	// InsertSessionBefore, when set, is the Ledger's InsertSession with a
	// deadline of the caller's own besides ctx's (*mysqlstore.Store's
	// method of that name): it gives up, as when ctx ends, at deadline while
	// the row is not sent, with an error wrapping
	// context.DeadlineExceeded. An apply's row is then written with it,
	// bounded by LedgerTimeout without a context derived per apply (a
	// context, a timer and a registration with the request's context).
	// It must be the method of the very Ledger given to NewService, not of
	// a store that Ledger wraps: a wrapper's own InsertSession would be
	// bypassed. nil: InsertSession under a derived context.
	InsertSessionBefore func(ctx context.Context, deadline time.Time, rec UsageRecord) error
}

// Service applies the accounting rules: check-and-reserve on apply, lease
// renewal on heartbeat, settle-and-refund on finish, and the status read.
// It is safe for concurrent use. Its methods are spread over files by
// concern: apply.go and record.go (apply and its recovery), heartbeat.go,
// finish.go, seed.go (rebuilding a balance from the ledger), status.go,
// admin.go (policies) and audit.go; policycache.go holds the policy cache.
type Service struct {
	balances BalanceStore
	ledger   Ledger
	inserter func(ctx context.Context, deadline time.Time, rec UsageRecord) error // Options.InsertSessionBefore
	sched    Scheduler
	policies *policyCache
	store    PolicyStore // writes and lists; reads go through policies
	opt      Options
	redis    Breaker // in front of balances (see redisFor)
	mysql    Breaker // in front of ledger and store

	seeding  singleflight.Group // per resource and period
	comp     compensations      // refused applies whose reservation to give back
	cancels  cancelMarks        // ledger rows of 503'd applies to mark CANCELLED
	catchUps catchUps           // after rebuilds (catchup.go)
	lengths  periodLengths      // the next period's length per resource (charge.go)
}

// NewService wires a Service to its stores.
func NewService(b BalanceStore, l Ledger, p PolicyStore, s Scheduler, opt Options) *Service {
	if opt.PolicyCacheTTL <= 0 {
		opt.PolicyCacheTTL = 2 * time.Second
	}
	if opt.FinishedRetention <= 0 {
		opt.FinishedRetention = 24 * time.Hour
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.NewSessionID == nil {
		opt.NewSessionID = randomID
	}
	if opt.LedgerTimeout <= 0 {
		opt.LedgerTimeout = 2 * time.Second
	}
	if opt.CatchUpConcurrency <= 0 {
		opt.CatchUpConcurrency = catchUpSlots
	}
	if opt.CloseMarksWait == 0 {
		opt.CloseMarksWait = closeMarksWait
	}
	return &Service{
		balances: b, ledger: l, inserter: opt.InsertSessionBefore, sched: s, store: p, opt: opt,
		redis: opt.Breakers.Balances, mysql: opt.Breakers.Ledger,
		comp:     compensations{wake: make(chan struct{}, 1)},
		policies: newPolicyCache(p, opt.Pools.Config, s, opt.Breakers.Ledger, opt.PolicyCacheTTL, opt.LedgerTimeout, opt.Now),
	}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionIDChars: a session id is 1 to 64 of these.
var sessionIDChars = newCharset(lowerLetters + upperLetters + digits + "_.:-")

func validateSessionID(id string) error {
	if id == "" {
		return invalid("sessionId", "is required")
	}
	if !sessionIDChars.matches(id, 64) {
		return invalid("sessionId", "must be 1 to 64 characters of [A-Za-z0-9_.:-]")
	}
	return nil
}

// clientIDChars: a client id is 1 to 128 of these.
var clientIDChars = newCharset(lowerLetters + upperLetters + digits + "_.:@/-")

// ValidateClientID checks a client id: 1 to 128 characters of
// [A-Za-z0-9_.:@/-]. It returns a *ValidationError for field "clientId".
// API keys are bound to client ids by the same rule.
func ValidateClientID(id string) error {
	if !clientIDChars.matches(id, 128) {
		return invalid("clientId", "must be 1 to 128 characters of [A-Za-z0-9_.:@/-]")
	}
	return nil
}

// isBackendFailure reports whether err means the center could not decide.
func isBackendFailure(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCircuitOpen)
}

// owns reports whether caller (a client id, "" = any) may use a session of
// owner.
func owns(caller, owner string) bool { return caller == "" || caller == owner }

// redisFor is the balance store's breaker for resource's calls: on a Redis
// Cluster, that of the master serving it (ForResource).
func (s *Service) redisFor(resource string) Breaker { return ForResource(s.redis, resource) }
