package pools

// wouldRefuse reports whether applyLine would refuse r now, without
// changing anything (the watermark's counter is read, not advanced).
func (m *Model) wouldRefuse(l *LineState, r ApplyReq, exempt bool) bool {
	if !exempt && m.watermarkWouldRefuse(l, r, 0) {
		return true
	}
	_, ok := want(r, m.roomWith(l, r, 0))
	return !ok
}

// fitsAfterSpare reports whether r fits by capacity once the spare buffer
// (SpareAmount) is in the shared pool, without moving it: the move is made
// only when it fits, so an apply refused even after it (one larger than
// the resource could grant) leaves the buffer where it was (apply.lua, the
// same rule).
func (m *Model) fitsAfterSpare(l *LineState, r ApplyReq) bool {
	_, ok := want(r, m.roomWith(l, r, m.SpareAmount(l.Name)))
	return ok
}

// SpareAmount is what SpareToShared(except) would move now, changing
// nothing: the buffer lent to no one plus what every line but except was
// lent and does not hold.
func (m *Model) SpareAmount(except string) int64 {
	moved := max(0, m.BufferFree())
	for _, ll := range m.Layout.Lines {
		if x := m.Lines[ll.Name]; x != nil && ll.Name != except {
			moved += max(0, x.Buffer-x.UsedBuffer)
		}
	}
	return moved
}

// SpareToShared puts the spare buffer into the shared pool: the buffer
// lent to no one and what every line but except was lent and does not hold
// now (in the layout's order). An apply of critical work or a continuation
// that would be refused, and that fits by capacity after the move
// (fitsAfterSpare), does it first (Model.Apply, apply.lua): the
// controller's short-shared-pool rule (Controller.guardShared) acts every
// 10 s and a period's last seconds can empty the shared pool between two
// ticks, with buffer lent to a line that holds none of it standing idle
// (issue 21 §2: a CORE line's critical apply and EXPLORE's critical applies
// were refused with a tenth of the limit lent, unheld, to another CORE
// line). It returns what it moved.
func (m *Model) SpareToShared(except string) int64 {
	moved := max(0, m.BufferFree())
	for _, ll := range m.Layout.Lines {
		x := m.Lines[ll.Name]
		if x == nil || ll.Name == except {
			continue
		}
		t := max(0, x.Buffer-x.UsedBuffer)
		x.Buffer -= t
		moved += t
	}
	m.SharedBuffer += moved
	return moved
}
