package pools

// LineRoom is what line l's next apply of r's kind (non-critical, critical,
// continuation) could be granted now, in the policy's unit: an answer's
// lineRemaining (docs/pools.md §5, open findings 2, 3 and D). It is the
// line's capacity (roomWith: its dedicated part left, what it may borrow,
// buffer lent to it and not held, capped by the limit's room, plus the
// grants it may draw) as the watermark rule lets that next apply take it,
// so that asking the answered figure is granted unless something changed in
// between:
//   - non-critical work (not a continuation): 0 when the watermark would
//     refuse the next such apply (its share is 100 %, or the line's refusal
//     counter RefuseAcc would pass 10000), else the capacity;
//   - critical work or a continuation: the capacity with the spare buffer
//     (SpareAmount) in the shared pool, which that apply moves first when it
//     would otherwise be refused and then fits; on a GROWTH or EXPLORE line
//     (critical work is not exempt there) 0 when the watermark would refuse
//     the next critical apply both before and after that move (it refuses
//     critical work from halfway between the watermark and 100 %).
//
// Without watermarks (m.Watermarks false: no move is made either) it is
// the capacity. apply.lua's nextRoom (pools.lib) is the same rule; an apply
// answers it after its grant, a refusal from the state the refusal left.
func (m *Model) LineRoom(l *LineState, r ApplyReq) int64 {
	if !m.Watermarks {
		return m.roomWith(l, r, 0)
	}
	if !r.Critical && !r.Continuation {
		if m.watermarkWouldRefuse(l, r, 0) {
			return 0
		}
		return m.roomWith(l, r, 0)
	}
	exempt := r.Continuation || (l.Tier == TierCore && r.Critical)
	moved := m.SpareAmount(l.Name)
	if !exempt && m.watermarkWouldRefuse(l, r, 0) && m.watermarkWouldRefuse(l, r, moved) {
		return 0
	}
	return m.roomWith(l, r, moved)
}

// roomWith is what r could be granted on l by capacity (watermark aside)
// with moved more buffer in the shared pool (0: as it is now): the
// dedicated part left, BorrowRoom, buffer lent and not held, capped by
// LimitRoom, plus the grants l may draw at r.Now. Nothing changes.
func (m *Model) roomWith(l *LineState, r ApplyReq, moved int64) int64 {
	m.SharedBuffer += moved
	availS := m.BorrowRoom(l, r.Critical, r.Continuation)
	m.SharedBuffer -= moved
	availD := max(0, l.OwnDedicated()-l.UsedDedicated)
	availB := max(0, l.Buffer-l.UsedBuffer)
	return min(availD+availS+availB, m.LimitRoom()) + grantRoom(m.activeGrants(l.Name, r.Now))
}

// watermarkWouldRefuse reports whether the watermark would refuse r's kind
// of apply on l now, with moved more buffer in the shared pool (the reach
// grows with what l may borrow): its share (RefuseShare) is 100 %, or the
// line's counter RefuseAcc would pass 10000 with it. The counter is read,
// not advanced; exemption (a continuation, CORE critical work) is the
// caller's to decide.
func (m *Model) watermarkWouldRefuse(l *LineState, r ApplyReq, moved int64) bool {
	m.SharedBuffer += moved
	availS := m.BorrowRoom(l, r.Critical, r.Continuation)
	m.SharedBuffer -= moved
	share := RefuseShare(l.Used(), l.OwnDedicated()+l.Buffer+l.UsedShared+availS, l.Watermark, r.Critical)
	return share >= 10000 || (share > 0 && l.RefuseAcc+share >= 10000)
}
