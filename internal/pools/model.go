package pools

import (
	"math"
	"slices"
	"strings"
)

// Reason says why an apply was refused.
type Reason string

// Refusal reasons (HTTP 429 QUOTA_EXHAUSTED with "reason").
const (
	// ReasonLineExhausted: the line has used all it may use (its dedicated
	// part, its borrowing limit or half of what the shared pool has free,
	// buffer lent to it, grants).
	ReasonLineExhausted Reason = "LINE_EXHAUSTED"
	// ReasonWatermark: the line is above its tier's reject watermark and this
	// apply fell in the refused proportion (RefuseShare).
	ReasonWatermark Reason = "WATERMARK"
	// ReasonPoolExhausted: the line's borrowing limit would cover the apply,
	// but the shared pool is (nearly) used up.
	ReasonPoolExhausted Reason = "POOL_EXHAUSTED"
	// ReasonExhausted: a resource without lines has nothing left (limit and
	// grants).
	ReasonExhausted Reason = "EXHAUSTED"
)

// GrantDraw is what one session holds of one temporary grant.
type GrantDraw struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// Drawn is which pools a session's grant came from (at apply), or what it
// was charged to (after finish). Amounts are in the policy's unit.
type Drawn struct {
	Dedicated int64       `json:"dedicated"`
	Shared    int64       `json:"shared"`
	Buffer    int64       `json:"buffer"`
	Grant     int64       `json:"grant"`            // sum of Grants
	Grants    []GrantDraw `json:"grants,omitempty"` // per grant, in draw order (expiry first)
	Base      int64       `json:"-"`                // resources without lines: drawn from the limit
}

// Total is the sum over every pool.
func (d Drawn) Total() int64 { return d.Base + d.Dedicated + d.Shared + d.Buffer + d.Grant }

// Grant is a temporary grant: extra quota usable from EffectiveMs
// (inclusive) to ExpiresMs (exclusive), by one line or (Line "") by all.
type Grant struct {
	ID          string `json:"id"`
	Line        string `json:"businessLine,omitempty"`
	Amount      int64  `json:"amount"`
	EffectiveMs int64  `json:"effectiveAtMs"`
	ExpiresMs   int64  `json:"expiresAtMs"`
	Used        int64  `json:"used"` // held by sessions (reserved or charged)
	Voided      bool   `json:"voided"`
}

// Active reports whether the grant may be drawn at now (ms).
func (g *Grant) Active(now int64) bool {
	return !g.Voided && g.EffectiveMs <= now && now < g.ExpiresMs
}

// LineState is one line: its layout, what the controller and operators
// moved, and what it holds in the current period.
type LineState struct {
	LineLayout
	Watermark int64 `json:"watermark"` // reject watermark now, basis points of MayUse
	Lent      int64 `json:"lent"`      // dedicated part moved away by reclaim
	Reclaimed int64 `json:"reclaimed"` // other lines' dedicated parts moved here by reclaim
	Buffer    int64 `json:"buffer"`    // buffer lent to the line (elasticity, release)

	// Held in the current period (reserved + charged), by pool.
	UsedDedicated int64 `json:"usedDedicated"`
	UsedShared    int64 `json:"usedShared"` // = borrowed
	UsedBuffer    int64 `json:"usedBuffer"`
	UsedGrant     int64 `json:"usedGrant"`
	Reserved      int64 `json:"reserved"`
	Charged       int64 `json:"charged"`
	// Consumed counts every amount granted, all periods; the controller
	// samples it for the line's rate.
	Consumed int64 `json:"consumed"`
	// RefuseAcc is the watermark's error-diffusion counter (basis points,
	// 0 … 9999): the refused shares of this line's applies above its
	// watermark, summed; each pass of 10000 refuses one apply.
	RefuseAcc int64 `json:"refuseAcc"`
	// Mode is the elasticity mode the controller chose for the line under
	// AUTO ("" = none yet); Settings.ModeOf gives the mode in force.
	Mode Mode `json:"mode,omitempty"`
	// ClosingUntil is the line's closing mark (CloseLine): the deadline (ms,
	// the store's clock) until which a DELETE of it refuses new sessions,
	// Deleted for a deleted line's tombstone, 0 for none (Closing).
	ClosingUntil int64 `json:"closingUntil,omitempty"`
}

// OwnDedicated is the dedicated part the line holds now: its layout's, less
// what was lent, plus what was reclaimed to it.
func (l *LineState) OwnDedicated() int64 { return l.Dedicated - l.Lent + l.Reclaimed }

// MayUse is what the line may use in a period, grants aside: its dedicated
// part now, its borrowing limit and buffer lent to it. Watermarks are
// fractions of it.
func (l *LineState) MayUse() int64 { return l.OwnDedicated() + l.BorrowCap + l.Buffer }

// Used is what the line holds, grants aside.
func (l *LineState) Used() int64 { return l.UsedDedicated + l.UsedShared + l.UsedBuffer }

// Session is one granted apply as the model keeps it.
type Session struct {
	ID       string
	Line     string
	Granted  int64
	Drawn    Drawn // at apply; after finish, what it was charged to
	Finished bool
	Leaked   bool
	Period   int64
	Actual   int64
}

// Model is the reference model of one resource's pools: the decisions the
// Lua scripts make, in plain Go. It is not safe for concurrent use.
type Model struct {
	Layout     Layout
	Lines      map[string]*LineState
	Watermarks bool // false: tiers are ignored (no watermark refusals)
	// SharedBuffer is buffer released to the shared pool.
	SharedBuffer int64
	SharedUsed   int64 // held from the shared pool in the current period, all lines
	BaseUsed     int64 // resources without lines: held from the limit in the current period
	Grants       []*Grant
	Sessions     map[string]*Session
	Period       int64 // current period id (any increasing number)
	// Epoch names the store's copy of the layout and its counters: it
	// changes when the store lost them and they were written afresh
	// (pool_layout.lua's "ep"), so that the controller knows the lines'
	// Consumed counters started again ("" in the simulation: never).
	Epoch string
}

// NewModel returns a model of the layout, every line at its tier's
// watermark, in period 0.
func NewModel(lay Layout, watermarks bool) *Model {
	m := &Model{Layout: lay, Lines: map[string]*LineState{}, Watermarks: watermarks, Sessions: map[string]*Session{}}
	for _, l := range lay.Lines {
		m.Lines[l.Name] = &LineState{LineLayout: l, Watermark: l.Tier.BaseWatermark()}
	}
	return m
}

// NewPeriod starts period id: every pool's holdings go back to zero; what
// the controller and operators moved stays.
func (m *Model) NewPeriod(id int64) {
	m.Period = id
	m.SharedUsed, m.BaseUsed = 0, 0
	for _, l := range m.Lines {
		l.UsedDedicated, l.UsedShared, l.UsedBuffer, l.UsedGrant, l.Reserved, l.Charged = 0, 0, 0, 0, 0, 0
	}
}

// SharedCap is the shared pool's size now: its layout plus buffer released
// to it.
func (m *Model) SharedCap() int64 { return m.Layout.Shared + m.SharedBuffer }

// BufferFree is the buffer not lent to any line or to the shared pool.
func (m *Model) BufferFree() int64 {
	free := m.Layout.Buffer - m.SharedBuffer
	for _, l := range m.Lines {
		free -= l.Buffer
	}
	return free
}

// ApplyReq is one apply as the model sees it.
type ApplyReq struct {
	SessionID    string
	Line         string // "" on a resource without lines
	Amount       int64  // 1 … MaxAmount
	Min          int64  // 0 = all or nothing; else the least grant accepted
	Critical     bool
	Continuation bool
	Now          int64 // ms, the store's clock (grants' windows, the closing mark's deadline)
}

// Decision is the model's answer to an apply.
type Decision struct {
	Granted int64
	Drawn   Drawn
	Reason  Reason // "" when granted
	// Remaining, of an apply on a line (granted or refused, not replayed),
	// is the answer's lineRemaining: what the line's next apply of the same
	// kind could be granted now (LineRoom), after this one's grant; 0 for
	// a resource without lines.
	Remaining int64
}

// Apply decides one apply and, when granted, records it. A session id seen
// before answers its first decision again (nothing changes).
func (m *Model) Apply(r ApplyReq) (Decision, error) {
	if s, ok := m.Sessions[r.SessionID]; ok {
		return Decision{Granted: s.Granted, Drawn: s.Drawn}, nil
	}
	var d Decision
	if len(m.Lines) == 0 {
		if r.Line != "" {
			return d, ErrUnknownLine
		}
		d = m.applyPlain(r)
	} else {
		l, ok := m.Lines[r.Line]
		if !ok {
			return d, ErrUnknownLine
		}
		if l.Closing(r.Now) {
			return d, ErrLineClosing
		}
		d = m.applyLine(l, r)
	}
	if d.Reason == "" {
		m.Sessions[r.SessionID] = &Session{ID: r.SessionID, Line: r.Line, Granted: d.Granted, Drawn: d.Drawn, Period: m.Period}
	}
	return d, nil
}

// want returns how much to grant out of avail, or false to refuse.
func want(r ApplyReq, avail int64) (int64, bool) {
	if avail >= r.Amount {
		return r.Amount, true
	}
	if r.Min > 0 && avail >= r.Min {
		return avail, true
	}
	return 0, false
}

// activeGrants lists the grants the line may draw at now, those that expire
// first first (ties by id).
func (m *Model) activeGrants(line string, now int64) []*Grant {
	var gs []*Grant
	for _, g := range m.Grants {
		if g.Active(now) && (g.Line == "" || g.Line == line) && g.Used < g.Amount {
			gs = append(gs, g)
		}
	}
	slices.SortFunc(gs, func(a, b *Grant) int {
		if a.ExpiresMs != b.ExpiresMs {
			if a.ExpiresMs < b.ExpiresMs {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return gs
}

// drawGrants takes up to n from gs in order and returns what it took.
func drawGrants(gs []*Grant, n int64, d *Drawn) int64 {
	taken := int64(0)
	for _, g := range gs {
		if n == 0 {
			break
		}
		x := min(n, g.Amount-g.Used)
		g.Used += x
		d.Grants = append(d.Grants, GrantDraw{ID: g.ID, Amount: x})
		d.Grant += x
		n -= x
		taken += x
	}
	return taken
}

func grantRoom(gs []*Grant) int64 {
	var n int64
	for _, g := range gs {
		n += g.Amount - g.Used
	}
	return n
}

// applyPlain: a resource without lines draws from the limit, then grants.
func (m *Model) applyPlain(r ApplyReq) Decision {
	gs := m.activeGrants("", r.Now)
	base := max(0, m.Layout.Limit-m.BaseUsed)
	n, ok := want(r, base+grantRoom(gs))
	if !ok {
		return Decision{Reason: ReasonExhausted}
	}
	d := Decision{Granted: n}
	d.Drawn.Base = min(n, base)
	m.BaseUsed += d.Drawn.Base
	drawGrants(gs, n-d.Drawn.Base, &d.Drawn)
	return d
}

// RefuseShare is the proportion, in basis points (0 … 10000), of the
// applies of a line holding used of reach, at watermark wm (basis points),
// that the watermark refuses. Non-critical applies are refused first: their
// share rises from 0 at the watermark to all of them halfway between the
// watermark and 100 %; critical applies only from that halfway point, to
// all of them at 100 % (seed 003 §3: refuse non-critical operations first;
// issue 21 §2). reach ≤ 0 refuses nothing here (the draw refuses). The float
// arithmetic is the same, in the same order, as in apply.lua (pools.lib), so both
// agree bit for bit.
func RefuseShare(used, reach, wm int64, critical bool) int64 {
	if reach <= 0 {
		return 0
	}
	x := float64(used) / float64(reach) * 100
	w := float64(wm) / 100
	span := (100 - w) / 2
	lo := w
	if critical {
		lo = w + span
	}
	if x < lo {
		return 0
	}
	frac := (x - lo) / span
	if frac >= 1 {
		return 10000
	}
	return int64(math.Floor(frac * 10000))
}

// refusedByWatermark decides whether the watermark refuses this apply of l:
// the server's own error-diffusion counter (LineState.RefuseAcc) adds the
// refused share and refuses whenever it passes 10000, so the refused
// proportion is exact over consecutive applies and no value the client
// chooses (session id, timing of ids) picks which ones are refused.
func refusedByWatermark(l *LineState, used, reach int64, critical bool) bool {
	share := RefuseShare(used, reach, l.Watermark, critical)
	switch {
	case share == 0:
		return false
	case share >= 10000:
		return true
	}
	l.RefuseAcc += share
	if l.RefuseAcc >= 10000 {
		l.RefuseAcc -= 10000
		return true
	}
	return false
}

// FreeBorrowDivisor: besides its borrowing limit, a line may borrow up to
// 1/FreeBorrowDivisor of what is free in the shared pool at each apply, so
// that the lines between them can take the whole pool (the seed's 50 % of
// a dedicated part alone leaves most of it ungrantable) while no one apply
// takes more than half of what is left.
const FreeBorrowDivisor = 2

// SharedFree is what the shared pool has left now.
func (m *Model) SharedFree() int64 { return max(0, m.SharedCap()-m.SharedUsed) }

// BorrowRoom is what an apply of line l may draw from the shared pool now:
// everything free for a continuation or, with tiers on, a CORE critical
// apply; otherwise the larger of what its borrowing limit leaves and half
// of what is free, never more than is free.
func (m *Model) BorrowRoom(l *LineState, critical, continuation bool) int64 {
	free := m.SharedFree()
	if continuation || (m.Watermarks && l.Tier == TierCore && critical) {
		return free
	}
	return min(free, max(l.BorrowCap-l.UsedShared, free/FreeBorrowDivisor))
}

// Reach is what line l could hold now with a non-exempt apply: its
// dedicated part, the buffer lent to it, what it holds of the shared pool
// and what it may still borrow (BorrowRoom). The watermark is a fraction of
// it, so a line is throttled as the quota it can reach runs short, not by a
// fixed share of a slice.
func (m *Model) Reach(l *LineState) int64 {
	return l.OwnDedicated() + l.Buffer + l.UsedShared + m.BorrowRoom(l, false, false)
}

// LimitRoom is what the limit has left for the pools: the limit less what
// sessions hold of it (every line's dedicated, shared and buffer draws and
// the base, not grants), never below 0.
func (m *Model) LimitRoom() int64 {
	held := m.BaseUsed
	for _, l := range m.Lines {
		held += l.Used()
	}
	return max(0, m.Layout.Limit-held)
}

func (m *Model) applyLine(l *LineState, r ApplyReq) Decision {
	exempt := r.Continuation || (l.Tier == TierCore && r.Critical)
	if m.Watermarks && (r.Critical || r.Continuation) && m.wouldRefuse(l, r, exempt) && m.fitsAfterSpare(l, r) {
		m.SpareToShared(l.Name)
	}
	availS := m.BorrowRoom(l, r.Critical, r.Continuation)
	acc0 := l.RefuseAcc // an apply refused for lack of room leaves it (apply.lua, the same)
	if m.Watermarks && !exempt && refusedByWatermark(l, l.Used(), l.OwnDedicated()+l.Buffer+l.UsedShared+availS, r.Critical) {
		return Decision{Reason: ReasonWatermark, Remaining: m.LineRoom(l, r)}
	}
	gs := m.activeGrants(l.Name, r.Now)
	availD := max(0, l.OwnDedicated()-l.UsedDedicated)
	availB := max(0, l.Buffer-l.UsedBuffer)
	availG := grantRoom(gs)
	// The pools never give more than the limit less what sessions hold of
	// it (not of grants): lent buffer a layout left standing may make them
	// add up to more (apply.lua, the same rule).
	fromPools := min(availD+availS+availB, m.LimitRoom())
	n, ok := want(r, fromPools+availG)
	if !ok {
		l.RefuseAcc = acc0
		// lineRemaining from the state the refusal left (LineRoom): with
		// the spare buffer still in place, what asking that much would
		// move and be granted.
		d := Decision{Reason: ReasonLineExhausted, Remaining: m.LineRoom(l, r)}
		if _, could := want(r, availD+availS+availB+availG); could {
			d.Reason = ReasonExhausted
		} else if _, could := want(r, availD+max(0, l.BorrowCap-l.UsedShared)+availB+availG); could {
			d.Reason = ReasonPoolExhausted
		}
		return d
	}
	d := Decision{Granted: n}
	rest := min(n, fromPools)
	d.Drawn.Dedicated = min(rest, availD)
	rest -= d.Drawn.Dedicated
	d.Drawn.Shared = min(rest, availS)
	rest -= d.Drawn.Shared
	d.Drawn.Buffer = min(rest, availB)
	drawGrants(gs, n-d.Drawn.Dedicated-d.Drawn.Shared-d.Drawn.Buffer, &d.Drawn)
	l.UsedDedicated += d.Drawn.Dedicated
	l.UsedShared += d.Drawn.Shared
	l.UsedBuffer += d.Drawn.Buffer
	l.UsedGrant += d.Drawn.Grant
	m.SharedUsed += d.Drawn.Shared
	l.Reserved += n
	l.Consumed += n
	d.Remaining = m.LineRoom(l, r)
	return d
}
