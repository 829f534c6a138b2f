package redisstore

// The codes the small scripts (seed, lock, unlock, adjust, drop, fail-open and its scoping)
// answer; the longer replies are decoded in replies.go.

// seedCode is seed.lua's reply.
type seedCode int64

const (
	seedAlreadyThere seedCode = 0 // a concurrent seeder wrote the balance; nothing written
	seedWrote        seedCode = 1 // this call wrote the balance (or, for a later chunk, ran)
	seedFenced       seedCode = 2 // the caller's lock is not its own any more: nothing written
)

// lockCode is lock.lua's reply.
type lockCode int64

const (
	lockHeldByOther lockCode = 0
	lockHeld        lockCode = 1 // taken now, or already the caller's (a resent call)
)

// unlockCode is unlock.lua's reply.
type unlockCode int64

const (
	unlockNotHeld  unlockCode = 0 // gone, or another holder's: left alone
	unlockReleased unlockCode = 1
)

// adjustCode is adjust.lua's reply.
type adjustCode int64

const (
	adjustNoBalance adjustCode = 0 // not seeded: seeding will read the ledger
	adjustApplied   adjustCode = 1
	adjustRepeated  adjustCode = 2 // a resend of a call that was applied
	adjustFenced    adjustCode = 3 // the caller's lock is not its own any more: nothing written
	adjustMoved     adjustCode = 4 // the balance is not the one measured: nothing written
	adjustHeld      adjustCode = 5 // a live session without a USING ledger row holds part of reserved: nothing written
)

// dropCode is drop.lua's reply.
type dropCode int64

const (
	dropNoBalance dropCode = 0 // nothing to drop
	dropDropped   dropCode = 1
	dropFenced    dropCode = 3 // the caller's lock is not its own any more: nothing dropped
)

// failOpenCode is failopen.lua's reply.
type failOpenCode int64

const (
	failOpenNoSession failOpenCode = 0 // missing or not USING
	failOpenFlagged   failOpenCode = 1
)

// failOpenScopeCode is failopen_scope.lua's reply.
type failOpenScopeCode int64

const (
	failOpenScopeNone  failOpenScopeCode = 0 // missing, not flagged or another client's: nothing changed
	failOpenScopeMoved failOpenScopeCode = 1
	failOpenScopeTaken failOpenScopeCode = 2 // a live session holds the scoped id: nothing changed
)
