package pools

import (
	"errors"
	"slices"
)

// ErrUnknownSession: no granted session has that id.
var ErrUnknownSession = errors.New("unknown session")

// ErrConflict: a repeated finish gives another actual amount.
var ErrConflict = errors.New("session finished with another actual amount")

// FinishOutcome is what a finish did.
type FinishOutcome struct {
	Refunded int64
	Overage  int64
	Charged  Drawn // what the session stays charged to, by pool
}

// Finish settles a session with its real usage. The unused part goes back
// to the pools it came from, in the reverse of the order it was drawn
// (grants, latest-expiring first, then buffer, shared, dedicated); an
// overage is charged to the line's dedicated part (to the limit on a
// resource without lines), which may then hold more than it owns, as a plain
// resource's charged may pass its limit. A grant that expired meanwhile
// gets its part back too, but being expired it is never drawn again: its
// unused part simply disappears. A session of an earlier period settles
// that period (whose counters the model no longer keeps) and the grants.
// Errors: ErrUnknownSession, ErrConflict.
func (m *Model) Finish(sid string, actual int64) (FinishOutcome, error) {
	s, ok := m.Sessions[sid]
	if !ok {
		return FinishOutcome{}, ErrUnknownSession
	}
	if s.Finished {
		if s.Actual != actual {
			return FinishOutcome{}, ErrConflict
		}
		return FinishOutcome{Refunded: max(0, s.Granted-actual), Overage: max(0, actual-s.Granted), Charged: s.Drawn}, nil
	}
	cur := s.Period == m.Period
	var l *LineState
	if s.Line != "" {
		l = m.Lines[s.Line]
	}
	out := FinishOutcome{Refunded: max(0, s.Granted-actual), Overage: max(0, actual-s.Granted)}
	if s.Leaked && l != nil && cur {
		// A swept session was already charged its whole grant; the finish
		// trues it up from there.
		l.Charged -= s.Granted
		l.Reserved += s.Granted
	}
	ch := Settle(s.Drawn, s.Granted, actual, s.Line != "")
	// Give back (or, for an overage, take) the difference, pool by pool.
	for _, g := range s.Drawn.Grants {
		x := g.Amount - heldOf(ch.Grants, g.ID)
		if gr := m.grant(g.ID); gr != nil {
			gr.Used -= x
		}
	}
	if l != nil {
		if cur {
			l.UsedDedicated += ch.Dedicated - s.Drawn.Dedicated
			l.UsedShared += ch.Shared - s.Drawn.Shared
			m.SharedUsed += ch.Shared - s.Drawn.Shared
			l.UsedBuffer += ch.Buffer - s.Drawn.Buffer
			l.UsedGrant += ch.Grant - s.Drawn.Grant
		}
	} else if cur {
		m.BaseUsed += ch.Base - s.Drawn.Base
	}
	if l != nil && cur {
		l.Reserved -= s.Granted
		l.Charged += actual
	}
	s.Finished, s.Actual, s.Drawn = true, actual, ch
	out.Charged = ch
	return out, nil
}

// Settle is what a session that drew d (granted in all) stays charged to
// once it reports actual: the unused part leaves the pools in the reverse
// of the draw order (grants, latest drawn first; buffer; shared;
// dedicated), an overage goes to the dedicated part (to the limit, Base,
// without lines). finish.lua computes the same; the ledger stores it.
func Settle(d Drawn, granted, actual int64, lined bool) Drawn {
	ch := d
	ch.Grants = slices.Clone(d.Grants)
	if actual > granted {
		if lined {
			ch.Dedicated += actual - granted
		} else {
			ch.Base += actual - granted
		}
		return ch
	}
	refund := granted - actual
	for i := len(ch.Grants) - 1; i >= 0 && refund > 0; i-- {
		x := min(refund, ch.Grants[i].Amount)
		ch.Grants[i].Amount -= x
		ch.Grant -= x
		refund -= x
	}
	ch.Grants = slices.DeleteFunc(ch.Grants, func(g GrantDraw) bool { return g.Amount == 0 })
	if len(ch.Grants) == 0 {
		ch.Grants = nil
	}
	for _, part := range []*int64{&ch.Buffer, &ch.Shared, &ch.Dedicated, &ch.Base} {
		x := min(refund, *part)
		*part -= x
		refund -= x
	}
	return ch
}

// Cancel gives back a granted session whose ledger row was not written (or
// whose write had an unknown outcome): its whole grant leaves the pools it
// drew from — each temporary grant its part, and, in the current period,
// the line's dedicated, shared and buffer counters (or the limit, without
// lines) — as a finish with nothing used would, and the session is gone: a
// later apply with its id starts afresh (cancel.lua; the ledger settles a
// row that landed after all with nothing charged). A finished or swept
// session, or one already cancelled, is left alone: it reports false (as
// for an unknown id). Consumed, the controller's count of everything
// granted, keeps the grant, as apply.lua's n:<line> does.
func (m *Model) Cancel(sid string) bool {
	s, ok := m.Sessions[sid]
	if !ok || s.Finished || s.Leaked {
		return false
	}
	for _, g := range s.Drawn.Grants {
		if gr := m.grant(g.ID); gr != nil {
			gr.Used -= g.Amount
		}
	}
	if s.Period == m.Period {
		if l := m.Lines[s.Line]; l != nil {
			l.UsedDedicated -= s.Drawn.Dedicated
			l.UsedShared -= s.Drawn.Shared
			m.SharedUsed -= s.Drawn.Shared
			l.UsedBuffer -= s.Drawn.Buffer
			l.UsedGrant -= s.Drawn.Grant
			l.Reserved -= s.Granted
		} else {
			m.BaseUsed -= s.Drawn.Base
		}
	}
	delete(m.Sessions, sid)
	return true
}

func heldOf(gs []GrantDraw, id string) int64 {
	for _, g := range gs {
		if g.ID == id {
			return g.Amount
		}
	}
	return 0
}

// Sweep marks a granted session LEAKED: its whole grant stays charged to
// the pools it came from. Sweeping a finished or swept session does
// nothing. Errors: ErrUnknownSession.
func (m *Model) Sweep(sid string) error {
	s, ok := m.Sessions[sid]
	if !ok {
		return ErrUnknownSession
	}
	if s.Finished || s.Leaked {
		return nil
	}
	s.Leaked = true
	if l := m.Lines[s.Line]; l != nil && s.Period == m.Period {
		l.Reserved -= s.Granted
		l.Charged += s.Granted
	}
	return nil
}

func (m *Model) grant(id string) *Grant {
	for _, g := range m.Grants {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// AddGrant records a temporary grant. Errors (*InputError): an empty or
// repeated id, an amount outside 1 … 2^53−1, an expiry not after the start,
// an unknown line.
func (m *Model) AddGrant(g Grant) error {
	switch {
	case g.ID == "" || m.grant(g.ID) != nil:
		return bad("id", "must be new and not empty")
	case g.Amount < 1 || g.Amount > MaxAmount:
		return bad("amount", "must be 1 … 2^53-1")
	case g.ExpiresMs <= g.EffectiveMs:
		return bad("expiresAt", "must be after effectiveAt")
	}
	if g.Line != "" {
		if _, ok := m.Lines[g.Line]; !ok {
			return bad("businessLine", "no such line")
		}
	}
	g.Used, g.Voided = 0, false
	m.Grants = append(m.Grants, &g)
	return nil
}

// VoidGrant ends a grant now: nothing more is drawn from it; what sessions
// hold of it stays theirs. Errors: ErrUnknownGrant.
func (m *Model) VoidGrant(id string) error {
	g := m.grant(id)
	if g == nil {
		return ErrUnknownGrant
	}
	g.Voided = true
	return nil
}

// ErrUnknownGrant: no grant has that id.
var ErrUnknownGrant = errors.New("unknown grant")

// Release lends amount of the free buffer to a line (line != "") or to the
// shared pool (line ""). Errors (*InputError): an amount outside 1 … the
// free buffer, an unknown line.
func (m *Model) Release(line string, amount int64) error {
	if amount < 1 || amount > m.BufferFree() {
		return bad("amount", "must be 1 … the free buffer (%d)", m.BufferFree())
	}
	if line == "" {
		m.SharedBuffer += amount
		return nil
	}
	l, ok := m.Lines[line]
	if !ok {
		return bad("businessLine", "no such line")
	}
	l.Buffer += amount
	return nil
}

// Return takes back up to amount of buffer lent to a line (or the shared
// pool), never what it holds now in this period; it returns what it took.
func (m *Model) Return(line string, amount int64) int64 {
	if line == "" {
		x := max(0, min(amount, m.SharedBuffer, m.SharedCap()-m.SharedUsed))
		m.SharedBuffer -= x
		return x
	}
	l, ok := m.Lines[line]
	if !ok {
		return 0
	}
	x := max(0, min(amount, l.Buffer, l.Buffer-l.UsedBuffer))
	l.Buffer -= x
	return x
}

// Reclaim moves up to amount of from's dedicated part to to, never more
// than from leaves unused in this period; it returns what it moved.
func (m *Model) Reclaim(from, to string, amount int64) int64 {
	f, t := m.Lines[from], m.Lines[to]
	if f == nil || t == nil || from == to {
		return 0
	}
	x := max(0, min(amount, f.OwnDedicated()-f.UsedDedicated))
	f.Lent += x
	t.Reclaimed += x
	return x
}

// GiveBack returns up to amount of what was reclaimed from `from` to `to`,
// never what to holds of it now; it returns what it moved.
func (m *Model) GiveBack(from, to string, amount int64) int64 {
	f, t := m.Lines[from], m.Lines[to]
	if f == nil || t == nil || from == to {
		return 0
	}
	x := max(0, min(amount, f.Lent, t.Reclaimed, t.OwnDedicated()-t.UsedDedicated))
	f.Lent -= x
	t.Reclaimed -= x
	return x
}
