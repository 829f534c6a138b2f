package pools

import (
	"errors"
	"fmt"
	"math"
)

// ErrUnknownReclaim: no reclaim has that id.
var ErrUnknownReclaim = errors.New("unknown reclaim")

// ErrReclaimState: the reclaim is not in a state that allows the step.
var ErrReclaimState = errors.New("reclaim is not WARNED or CONFIRMED")

// ReclaimWindowMs is the window over which a line loses at most
// ReclaimMaxShare of its dedicated part to reclaims, and after a give-back
// to it no new reclaim takes from it (hysteresis: quota does not move back
// and forth).
const ReclaimWindowMs int64 = 3_600_000

// ReclaimGiveBackAbove: a lender gets its quota back when it uses (or is
// forecast to use in a period) this share of its dedicated part now; it is
// a lender only under ReclaimIdleBelow. The gap between the two is the
// hysteresis.
const ReclaimGiveBackAbove = 0.75

// pressed reports whether line l is under pressure: what it holds of its
// dedicated part and the shared pool is at or above its watermark of what
// it can reach of them (Model.Reach without lent buffer, which is only
// lent for a while), so its applies are being refused or about to be.
func pressed(m *Model, l *LineState) (float64, bool) {
	reach := m.Reach(l) - l.Buffer
	if reach <= 0 {
		return 0, false
	}
	u := float64(l.UsedDedicated+l.UsedShared) / float64(reach)
	return u, u*10000 >= float64(l.Watermark)
}

// reclaim is the periodic reclaim step: first give back to lenders whose
// use rose again (ReclaimGiveBackAbove), then, when some line is under
// pressure (pressed), warn one reclaim from each idle line — using under
// 50 % of its dedicated part and forecast to use under 50 % of it in a
// period, none open already, no give-back to it within ReclaimWindowMs —
// of what it leaves unused, within ReclaimMaxShare of its dedicated part
// over ReclaimWindowMs, to the most pressed line.
func (c *Controller) reclaim(m *Model, now int64, names []string, emit emitFunc) {
	for _, r := range c.Reclaims {
		if r.State != ReclaimExecuted || r.DryRun {
			continue
		}
		f := m.Lines[r.From]
		fc := c.forecastUse(r.From)
		if math.IsInf(fc, 1) {
			fc = 0
		}
		if f == nil || max(float64(f.UsedDedicated), fc) < ReclaimGiveBackAbove*float64(f.OwnDedicated()) {
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
		c.line(r.From).gaveBackMs = now
		emit("GIVE_BACK", r.From, got, "reclaim %s: the lender's use rose again; it gets its quota back first", r.ID).To = r.To
	}
	to, best := "", -1.0
	for _, n := range names {
		if u, ok := pressed(m, m.Lines[n]); ok && u > best {
			to, best = n, u
		}
	}
	if to == "" {
		return
	}
	for _, n := range names {
		l, lc := m.Lines[n], c.line(n)
		if n == to || c.open(n) || float64(l.UsedDedicated) >= ReclaimIdleBelow*float64(l.OwnDedicated()) ||
			c.forecastUse(n) >= ReclaimIdleBelow*float64(l.OwnDedicated()) ||
			(lc.gaveBackMs != 0 && now-lc.gaveBackMs < ReclaimWindowMs) {
			continue
		}
		amt := min(int64(float64(l.Dedicated)*ReclaimMaxShare)-c.takenWithin(n, now), l.OwnDedicated()-l.UsedDedicated)
		if amt <= 0 {
			continue
		}
		c.nextID++
		r := &Reclaim{ID: fmt.Sprintf("r%d", c.nextID), From: n, To: to, Amount: amt, State: ReclaimWarned,
			DryRun: c.Settings.ReclaimDryRun, WarnedMs: now, UpdateMs: now,
			Reason: fmt.Sprintf("%s is at %.0f%% of what it can reach, past its watermark; %s uses under 50%% of its dedicated part", to, best*100, n)}
		c.Reclaims = append(c.Reclaims, r)
		emit("RECLAIM_WARNED", n, amt, "reclaim %s: %s", r.ID, r.Reason)
	}
}

// takenWithin is what reclaims warned within ReclaimWindowMs before now
// take, or took, from line (cancelled ones aside; what was given back
// still counts: the cap bounds what a line loses per window).
func (c *Controller) takenWithin(line string, now int64) int64 {
	var n int64
	for _, r := range c.Reclaims {
		if r.From == line && r.State != ReclaimCancelled && now-r.WarnedMs < ReclaimWindowMs {
			n += max(r.Amount, r.moved)
		}
	}
	return n
}

// forecastUse is the line's forecast use in one period (or in the horizon,
// for longer periods) at its smoothed rate; +Inf before its first rate (a
// line the controller knows nothing of yet is nobody's lender).
func (c *Controller) forecastUse(line string) float64 {
	lc := c.line(line)
	if !lc.holtReady {
		return math.Inf(1)
	}
	return math.Max(0, lc.level) * c.periodSeconds()
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
	r.Amount, r.State, r.moved = got, ReclaimExecuted, got
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
