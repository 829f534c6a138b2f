package pools

// AtRest reports whether the controller, ticked again later on m unchanged
// (no consumption, no move), would decide nothing (issue 23 §1: the pool
// controller may then skip the resource until its pools change,
// poolctl.Runner.Visits). Call it right after a Tick on m that decided
// nothing. It holds when no reclaim waits for its confirmation or
// execution (those advance with time), the shared pool holds no buffer
// guardShared put there, and for each line: nothing is lent (no return to
// make), no reactive hold runs, the watermark is its tier's (no decay to
// make), the line is not pressed (no reclaim to start); and, elasticity
// on, its last four samples (two minutes) saw no consumption, none since,
// and the forecast lends nothing now. Then a later sample of zero
// consumption raises no watermark (no rise), starts no reactive release
// (no rate) and lends nothing (the forecast only decays). Under AUTO the
// mode must also be the one further zero samples keep: REACTIVE while the
// forecast is above zero (its error is then 100 %), PREDICTIVE once it
// is zero. What is not covered: the mode's return to PREDICTIVE once a
// decaying forecast reaches exactly zero, hours later, waits for the next
// visit. The operator releases (Released) are the caller's: one that
// expires is a time of its own.
func (c *Controller) AtRest(m *Model) bool {
	if c.guardHeld != 0 {
		return false
	}
	for _, r := range c.Reclaims {
		if r.State == ReclaimWarned || r.State == ReclaimConfirmed {
			return false
		}
	}
	on := c.Settings.Elasticity != ElasticityOff
	if on && !c.didSample {
		return false
	}
	for name, l := range m.Lines {
		if _, p := pressed(m, l); p || l.Watermark != l.Tier.BaseWatermark() {
			return false
		}
		lc := c.lines[name]
		if lc == nil {
			if on {
				return false
			}
			continue
		}
		if lc.predLent+lc.reactLent != 0 || lc.reactiveUntil != 0 || lc.raised {
			return false
		}
		if on && !c.lineAtRest(l, lc) {
			return false
		}
	}
	return true
}

// lineAtRest is AtRest's sampling part for one line (elasticity on).
func (c *Controller) lineAtRest(l *LineState, lc *lineCtl) bool {
	if l.Consumed != lc.lastConsumed || len(lc.rates) < 4 {
		return false
	}
	for _, x := range lc.rates {
		if x != 0 {
			return false
		}
	}
	if d, may := c.demand(l, lc); d > PredictLendAbove*may {
		return false
	}
	if c.Settings.Elasticity == ElasticityAuto {
		want := ModePredictive
		if lc.forecast > 0 {
			want = ModeReactive
		}
		return lc.mode == want
	}
	return true
}
