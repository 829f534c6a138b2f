package pools

import (
	"errors"
	"fmt"
)

// ErrUnknownReclaim: no reclaim has that id.
var ErrUnknownReclaim = errors.New("unknown reclaim")

// ErrReclaimState: the reclaim is not in a state that allows the step.
var ErrReclaimState = errors.New("reclaim is not WARNED or CONFIRMED")

// reclaim is the periodic reclaim step: first give back to lenders whose
// use rose again, then, when the shared pool is at least
// reclaimThresholdPercent full, warn one reclaim from each idle line
// (using under 50 % of its dedicated part, none open already) to the line
// that needs it most (the fullest line that has used its borrowing limit or
// found the shared pool empty).
func (c *Controller) reclaim(m *Model, now int64, names []string, emit emitFunc) {
	for _, r := range c.Reclaims {
		if r.State != ReclaimExecuted || r.DryRun {
			continue
		}
		f := m.Lines[r.From]
		if f == nil || float64(f.UsedDedicated) < ReclaimIdleBelow*float64(f.OwnDedicated()) {
			continue
		}
		got := m.GiveBack(r.From, r.To, r.Amount)
		if got == 0 {
			continue
		}
		r.Amount -= got
		if r.Amount == 0 {
			r.State = ReclaimReturned
		}
		r.UpdateMs = now
		emit("GIVE_BACK", r.From, got, "reclaim %s: the lender's use rose again; it gets its quota back first", r.ID).To = r.To
	}
	capS := m.SharedCap()
	if capS <= 0 || m.SharedUsed*100 < c.Settings.ReclaimThresholdPercent*capS {
		return
	}
	to, best := "", -1.0
	for _, n := range names {
		l := m.Lines[n]
		if l.MayUse() <= 0 || (l.UsedShared < l.BorrowCap && m.SharedUsed < capS) {
			continue
		}
		if u := float64(l.Used()) / float64(l.MayUse()); u > best && u >= 0.9 {
			to, best = n, u
		}
	}
	if to == "" {
		return
	}
	for _, n := range names {
		l := m.Lines[n]
		if n == to || c.open(n) || float64(l.UsedDedicated) >= ReclaimIdleBelow*float64(l.OwnDedicated()) {
			continue
		}
		amt := min(int64(float64(l.Dedicated)*ReclaimMaxShare), l.OwnDedicated()-l.UsedDedicated)
		if amt <= 0 {
			continue
		}
		c.nextID++
		r := &Reclaim{ID: fmt.Sprintf("r%d", c.nextID), From: n, To: to, Amount: amt, State: ReclaimWarned,
			DryRun: c.Settings.ReclaimDryRun, WarnedMs: now, UpdateMs: now,
			Reason: fmt.Sprintf("shared pool %d%% used; %s uses under 50%% of its dedicated part; %s is at %.0f%%", m.SharedUsed*100/capS, n, to, best*100)}
		c.Reclaims = append(c.Reclaims, r)
		emit("RECLAIM_WARNED", n, amt, "reclaim %s: %s", r.ID, r.Reason)
	}
}

func (c *Controller) open(line string) bool {
	for _, r := range c.Reclaims {
		if r.From == line && (r.State == ReclaimWarned || r.State == ReclaimConfirmed) {
			return true
		}
	}
	return false
}

// advanceReclaims confirms WARNED reclaims whose delay passed (when
// confirmation is automatic) and executes CONFIRMED ones.
func (c *Controller) advanceReclaims(m *Model, now int64, emit emitFunc) {
	for _, r := range c.Reclaims {
		if r.State == ReclaimWarned && c.Settings.ReclaimConfirmSeconds > 0 && now-r.WarnedMs >= c.Settings.ReclaimConfirmSeconds*1000 {
			r.State, r.UpdateMs = ReclaimConfirmed, now
			emit("RECLAIM_CONFIRMED", r.From, r.Amount, "reclaim %s: confirmed after %d s", r.ID, c.Settings.ReclaimConfirmSeconds)
		}
		if r.State == ReclaimConfirmed {
			c.execute(m, r, now, emit)
		}
	}
}

func (c *Controller) execute(m *Model, r *Reclaim, now int64, emit emitFunc) {
	r.UpdateMs = now
	if r.DryRun {
		r.State = ReclaimExecuted
		emit("RECLAIM_EXECUTED", r.From, r.Amount, "reclaim %s: dry run, nothing moved (would move to %s)", r.ID, r.To)
		return
	}
	got := m.Reclaim(r.From, r.To, r.Amount)
	if got == 0 {
		r.State = ReclaimCancelled
		emit("RECLAIM_CANCELLED", r.From, 0, "reclaim %s: %s no longer has idle dedicated quota", r.ID, r.From)
		return
	}
	r.Amount, r.State = got, ReclaimExecuted
	emit("RECLAIM_EXECUTED", r.From, got, "reclaim %s: %d moved from %s to %s", r.ID, got, r.From, r.To).To = r.To
}

// Confirm confirms a WARNED reclaim by hand and executes it at once.
// Errors: ErrUnknownReclaim, ErrReclaimState.
func (c *Controller) Confirm(m *Model, id string, now int64) ([]Event, error) {
	r := c.find(id)
	if r == nil {
		return nil, ErrUnknownReclaim
	}
	if r.State != ReclaimWarned {
		return nil, ErrReclaimState
	}
	var evs []Event
	emit := emitter(&evs, now)
	r.State = ReclaimConfirmed
	emit("RECLAIM_CONFIRMED", r.From, r.Amount, "reclaim %s: confirmed by hand", r.ID)
	c.execute(m, r, now, emit)
	return evs, nil
}

// Cancel cancels a WARNED or CONFIRMED reclaim. Errors: ErrUnknownReclaim,
// ErrReclaimState.
func (c *Controller) Cancel(id string, now int64) (Event, error) {
	r := c.find(id)
	if r == nil {
		return Event{}, ErrUnknownReclaim
	}
	if r.State != ReclaimWarned && r.State != ReclaimConfirmed {
		return Event{}, ErrReclaimState
	}
	r.State, r.UpdateMs = ReclaimCancelled, now
	return Event{AtMs: now, Kind: "RECLAIM_CANCELLED", Line: r.From, Reason: "reclaim " + r.ID + ": cancelled by hand"}, nil
}

func (c *Controller) find(id string) *Reclaim {
	for _, r := range c.Reclaims {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// SyncReclaims replaces the controller's reclaims with those the policy
// store holds (an operator may have confirmed or cancelled some; another
// instance may have made them). Ids keep increasing past the largest seen.
func (c *Controller) SyncReclaims(rs []Reclaim) {
	c.Reclaims = c.Reclaims[:0]
	for i := len(rs) - 1; i >= 0; i-- { // the store lists newest first
		r := rs[i]
		c.Reclaims = append(c.Reclaims, &r)
		var n int
		if _, err := fmt.Sscanf(r.ID, "r%d", &n); err == nil && n > c.nextID {
			c.nextID = n
		}
	}
}
