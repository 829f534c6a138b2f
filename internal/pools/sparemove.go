package pools

// wouldRefuse reports whether applyLine would refuse r now, without
// changing anything (the watermark's counter is read, not advanced).
func (m *Model) wouldRefuse(l *LineState, r ApplyReq, exempt bool) bool {
	availS := m.BorrowRoom(l, r.Critical, r.Continuation)
	if !exempt {
		share := RefuseShare(l.Used(), l.OwnDedicated()+l.Buffer+l.UsedShared+availS, l.Watermark, r.Critical)
		if share >= 10000 || (share > 0 && l.RefuseAcc+share >= 10000) {
			return true
		}
	}
	availD := max(0, l.OwnDedicated()-l.UsedDedicated)
	availB := max(0, l.Buffer-l.UsedBuffer)
	_, ok := want(r, min(availD+availS+availB, m.LimitRoom())+grantRoom(m.activeGrants(l.Name, r.Now)))
	return !ok
}

// afterSpare is what r could be granted by capacity once the spare buffer
// (SpareAmount) is in the shared pool, and whether r then fits, without
// moving it: the move is made only when it fits, so an apply refused even
// after it (one larger than the resource could grant) leaves the buffer
// where it was (apply.lua, the same rule).
func (m *Model) afterSpare(l *LineState, r ApplyReq) (int64, bool) {
	moved := m.SpareAmount(l.Name)
	m.SharedBuffer += moved
	availS := m.BorrowRoom(l, r.Critical, r.Continuation)
	m.SharedBuffer -= moved
	availD := max(0, l.OwnDedicated()-l.UsedDedicated)
	availB := max(0, l.Buffer-l.UsedBuffer)
	room := min(availD+availS+availB, m.LimitRoom()) + grantRoom(m.activeGrants(l.Name, r.Now))
	_, ok := want(r, room)
	return room, ok
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
// (afterSpare), does it first (Model.Apply, apply.lua): the
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
