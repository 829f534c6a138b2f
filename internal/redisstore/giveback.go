package redisstore

import "github.com/quotacenter/quota-center/internal/quota"

// The Go reference models of what the scripts that take from a balance
// decide (issue 22 §1), held against the scripts by
// TestGiveBacksMatchTheModel: every give-back is once per reservation, a
// drift correction takes no reservation a live session still holds, and
// neither ever leaves a balance below zero.

// takeDecision is the rule of finish.lua, cancel.lua, sweep.lua and
// uncharge.lua: a balance field holding have may lose take only if it
// stays at zero or above; otherwise the script refuses with
// quota.ErrNegativeBalance and changes nothing.
func takeDecision(have, take int64) error {
	if have-take < 0 {
		return quota.ErrNegativeBalance
	}
	return nil
}

// adjustDecision is adjust.lua's decision (the mark, the lock and a missing
// balance aside) for a correction a of the balance now holding charged and
// reserved; held is the sum of the grants of a.Unrecorded's sessions that
// are USING in the balance's period and counted by it, which the
// correction keeps. It returns the outcome and the deltas written.
func adjustDecision(charged, reserved int64, a quota.Adjustment, held int64) (out quota.AdjustOutcome, dc, dr int64, err error) {
	if a.Seen.Exists && (a.Seen.Charged != charged || a.Seen.Reserved != reserved) {
		return quota.AdjustMoved, 0, 0, nil
	}
	dc, dr = a.Charged, a.Reserved+held
	if dc == 0 && dr == 0 {
		return quota.AdjustHeld, 0, 0, nil
	}
	if charged+dc < 0 || reserved+dr < 0 {
		return 0, 0, 0, quota.ErrNegativeBalance
	}
	return quota.AdjustApplied, dc, dr, nil
}
