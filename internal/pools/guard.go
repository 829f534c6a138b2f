package pools

// sharedShort reports whether the shared pool is at least
// reclaimThresholdPercent used (90 % by default).
func (c *Controller) sharedShort(m *Model) bool {
	capS := m.SharedCap()
	return capS > 0 && m.SharedUsed*100 >= c.Settings.ReclaimThresholdPercent*capS
}

// guardCore lends the free buffer to the CORE lines, in equal parts, at
// every tick the shared pool is short (sharedShort): a CORE critical apply
// may take all of the shared pool, and past it the buffer lent to its line,
// so CORE's critical work is not refused while the reserve has quota
// (issue 21 §2). The buffer goes back, 10 % a tick, once the shared pool is
// no longer short.
func (c *Controller) guardCore(m *Model, names []string, emit emitFunc) {
	if !c.sharedShort(m) {
		return
	}
	// Buffer this controller lent to lines below CORE and that they do not
	// hold comes back first: CORE's critical work before a burst's.
	for _, n := range names {
		l, lc := m.Lines[n], c.line(n)
		if l.Tier == TierCore || lc.predLent+lc.reactLent == 0 {
			continue
		}
		if got := m.Return(n, lc.predLent+lc.reactLent); got > 0 {
			fromReact := min(got, lc.reactLent)
			lc.reactLent -= fromReact
			lc.predLent -= got - fromReact
			emit("RETURN", n, got, "the shared pool is short: unused buffer goes to the CORE lines")
		}
	}
	free := m.BufferFree()
	if free <= 0 {
		return
	}
	var core []string
	for _, n := range names {
		if m.Lines[n].Tier == TierCore {
			core = append(core, n)
		}
	}
	for i, n := range core {
		x := free / int64(len(core))
		if i == 0 {
			x += free % int64(len(core))
		}
		if x <= 0 || m.Release(n, x) != nil {
			continue
		}
		lc := c.line(n)
		lc.predLent += x
		lc.peakLent = max(lc.peakLent, lc.predLent+lc.reactLent)
		lc.guard = true
		emit("LEND_PREDICTIVE", n, x, "the shared pool is %d%% used: buffer to the CORE line, so that its critical work is not refused", m.SharedUsed*100/m.SharedCap())
	}
}
