package pools

// LineRoom is what line l's next apply of r's kind (critical,
// continuation) could be granted now, in the policy's unit: its dedicated
// part left, what it may borrow (BorrowRoom), buffer lent to it and not
// held, capped by the limit's room (LimitRoom), plus the grants it may
// draw. For non-critical work (not a continuation) the watermark decides
// first: when the line's next such apply would be refused by it (its share
// is 100 %, or the line's refusal counter RefuseAcc would pass 10000) the
// room is 0, so that asking the answered lineRemaining is granted unless
// something changed in between (docs/pools.md §5, open finding 2).
// Critical work is answered the line's capacity. apply.lua's nextRoom
// (pools.lib) is the same rule; an apply answers it after its grant.
func (m *Model) LineRoom(l *LineState, r ApplyReq) int64 {
	availS := m.BorrowRoom(l, r.Critical, r.Continuation)
	availD := max(0, l.OwnDedicated()-l.UsedDedicated)
	availB := max(0, l.Buffer-l.UsedBuffer)
	room := min(availD+availS+availB, m.LimitRoom()) + grantRoom(m.activeGrants(l.Name, r.Now))
	if m.Watermarks && !r.Critical && !r.Continuation {
		share := RefuseShare(l.Used(), l.OwnDedicated()+l.Buffer+l.UsedShared+availS, l.Watermark, false)
		if share >= 10000 || (share > 0 && l.RefuseAcc+share >= 10000) {
			return 0
		}
	}
	return room
}

// refusedRoom is a refusal's lineRemaining: for non-critical work
// LineRoom (0 when the watermark would refuse the next one); for critical
// work or a continuation what it could be granted now (avail), or with the
// spare buffer moved (shown) when that is more.
func (m *Model) refusedRoom(l *LineState, r ApplyReq, avail, shown int64) int64 {
	if !r.Critical && !r.Continuation {
		return m.LineRoom(l, r)
	}
	return max(avail, shown)
}
