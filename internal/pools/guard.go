package pools

import "math"

// sharedShort reports whether the shared pool is at least
// reclaimThresholdPercent used (90 % by default), measured against the
// shared pool without the buffer guardShared put into it (with it, the
// release itself would end the shortage it answers).
//
// Nor is buffer there that no active release holds and this rule did not
// put there counted (unowned): an apply put it there when it would have
// refused critical work or a continuation between two ticks
// (Model.SpareToShared), or a release expired while sessions held it.
func (c *Controller) sharedShort(m *Model) bool {
	capS := m.SharedCap() - c.guardHeld - c.unowned(m)
	return capS > 0 && m.SharedUsed*100 >= c.Settings.ReclaimThresholdPercent*capS
}

// unowned is the buffer in the shared pool that no active operator release
// (Released) holds and guardShared did not put there.
func (c *Controller) unowned(m *Model) int64 {
	return max(0, m.SharedBuffer-c.Released[""]-c.guardHeld)
}

// guardShared releases the buffer into the shared pool at every tick the
// shared pool is short (sharedShort) — seed 003's "the shared pool nearly
// exhausted" — first taking back the buffer this controller lent to any
// line and that the line does not hold. In the shared pool the tiers decide
// who gets it: a CORE critical apply takes everything free, continuations
// may take everything free, and the watermarks refuse the lower tiers'
// non-critical applies first as what they can reach runs short. Before,
// the buffer was lent to the CORE lines, where it sat unused while the
// other lines' critical applies (and a CORE line without it) were refused
// with a tenth of the limit unheld (issue 21 §2;
// TestShortSharedPoolGetsTheUnusedBuffer). It goes back, 10 % of the most
// it put there a tick, once the shared pool is no longer short.
func (c *Controller) guardShared(m *Model, names []string, emit emitFunc) {
	c.guardHeld = min(c.guardHeld, m.SharedBuffer) // a period's end or an operator may have taken it
	short := c.sharedShort(m)
	if o := c.unowned(m); short && o > 0 {
		// Unowned buffer in a short shared pool is where this rule would
		// put it: it becomes the rule's (kept while the pool is short, then
		// back 10 % a tick), not given back to be released again.
		c.guardHeld += o
		c.guardPeak = max(c.guardPeak, c.guardHeld)
	}
	if !short {
		if c.guardHeld > 0 {
			step := max(1, int64(math.Ceil(float64(c.guardPeak)*ReturnPerTick)))
			if got := m.Return("", min(step, c.guardHeld)); got > 0 {
				c.guardHeld -= got
				emit("RETURN", "", got, "the shared pool is no longer short: 10%% of the buffer put there back every 10 s")
			}
		}
		if c.guardHeld == 0 {
			c.guardPeak = 0
		}
		return
	}
	for _, n := range names {
		lc := c.line(n)
		if lc.predLent+lc.reactLent == 0 {
			continue
		}
		if got := m.Return(n, lc.predLent+lc.reactLent); got > 0 {
			fromReact := min(got, lc.reactLent)
			lc.reactLent -= fromReact
			lc.predLent -= got - fromReact
			emit("RETURN", n, got, "the shared pool is short: buffer the line does not hold goes to the shared pool")
		}
	}
	free := m.BufferFree()
	if free <= 0 || m.Release("", free) != nil {
		return
	}
	c.guardHeld += free
	c.guardPeak = max(c.guardPeak, c.guardHeld)
	emit("LEND_PREDICTIVE", "", free, "the shared pool is %d%% used: the buffer goes to the shared pool, where CORE's critical work takes it first and the watermarks refuse non-critical work first",
		m.SharedUsed*100/max(1, m.SharedCap()-c.guardHeld))
}
