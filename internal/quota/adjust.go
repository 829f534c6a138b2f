package quota

import "errors"

// ErrNegativeBalance: a balance store refused a change that would have
// left a period's reserved or charged below zero (issue 22 §1: a
// reservation given back twice, once by reconciliation and once by the
// sweeper, made reserved −335 and let an apply past the limit). Each script
// that takes from a balance (finish, cancel, sweep, uncharge, a
// reconciliation's correction) checks before it writes, so nothing was
// changed. It means the balance already disagrees with its sessions:
// reconciliation corrects it from the ledger (an increase is never
// refused). Never a backend failure (a breaker does not count it).
var ErrNegativeBalance = errors.New("balance would go negative")

// Adjustment is a drift correction of one period's balance made by
// reconciliation (internal/reconcile): deltas found by comparing the
// balance with the ledger, applied only while what they were measured on
// still holds.
type Adjustment struct {
	Charged, Reserved int64 // added to the balance, in the policy's unit
	// Seen is the balance the deltas were measured on: the correction is
	// refused (AdjustMoved) unless the balance's charged and reserved are
	// still these, so a correction is never applied on top of a change it
	// did not see (a give-back since, or a resend of the same correction
	// after a lost answer).
	Seen Balance
	// Unrecorded are the ids of the resource's USING sessions in the
	// balance store whose ledger row is not USING (none yet, or CANCELLED,
	// FINISHED or LEAKED): reservations the ledger does not count and that
	// a session record still holds (issue 22 §1). The grant of each one
	// that is USING in this period and counted by this balance (its epoch)
	// is added back to Reserved in the same atomic step: reserved becomes
	// the ledger's plus what those sessions hold, and each of them is
	// given back once, by its own finish, cancel or sweep — never also by
	// the correction.
	Unrecorded []string
}

// AdjustOutcome is what became of an Adjustment.
type AdjustOutcome int

const (
	// AdjustApplied: the deltas were added (or this very call was applied
	// before: a resend).
	AdjustApplied AdjustOutcome = iota + 1
	// AdjustNoBalance: the period has no balance; it will be seeded from
	// the ledger, which needs no correction.
	AdjustNoBalance
	// AdjustMoved: the balance is no longer Seen; nothing changed.
	AdjustMoved
	// AdjustHeld: once the reservations live Unrecorded sessions hold
	// were kept, nothing was left to correct; nothing changed.
	AdjustHeld
)

// String is the outcome's name, as in logs and metric labels.
func (o AdjustOutcome) String() string {
	switch o {
	case AdjustApplied:
		return "applied"
	case AdjustNoBalance:
		return "no_balance"
	case AdjustMoved:
		return "moved"
	case AdjustHeld:
		return "held"
	}
	return "unknown"
}
