package pools

import "sort"

// Journal event kinds that rebuild a resource's moves (Moves): the buffer
// lent (RELEASE by an operator, LEND_* by the controller, less every
// RETURN), the last watermark set (WATERMARK_*), and PoolsCleared, written
// when a resource loses its last line (its moves are gone with it: later
// events start from nothing).
const (
	KindPoolsCleared = "POOLS_CLEARED"
)

// LendKinds are the event kinds that lend buffer; ReturnKind gives it back.
var LendKinds = []string{"RELEASE", "LEND_PREDICTIVE", "LEND_REACTIVE", KindSpareToShared}

// KindWatermarkTier journals a line's watermark set back to its new tier's
// (Amount, basis points) when an operator changed the line's tier: the
// layout does it in Redis (Model.Relayout), and a rebuild must not bring
// back the watermark the controller had set under the old tier.
const KindWatermarkTier = "WATERMARK_TIER"

// WatermarkKinds are the event kinds that set a line's watermark (Amount).
var WatermarkKinds = []string{"WATERMARK_RAISED", "WATERMARK_LOWERED", "WATERMARK_DECAYED", KindWatermarkTier}

// ReturnKind is the event kind that gives lent buffer back.
const ReturnKind = "RETURN"

// Moves is what the controller and operators moved in a resource's pools
// (the live part of qc:{r}:pl, which Redis alone holds), as rebuilt from the
// policy store after Redis lost it: the event journal (buffer lent, last
// watermarks) and the executed reclaims. Amounts in the policy's unit,
// watermarks in basis points. Line "" of Buffer is the shared pool.
type Moves struct {
	Watermarks map[string]int64 // line → the last watermark set (absent: its tier's)
	Buffer     map[string]int64 // line → buffer lent to it now; "" = released to the shared pool
	Reclaims   []Reclaim        // the resource's reclaims; the executed ones (not dry-run) moved quota
}

// Fields returns the qc:{r}:pl fields that carry m on lay, bounded as the
// moves themselves are: only lines of lay; watermarks within
// [WatermarkFloor, MaxWatermark]; lent buffer non-negative; executed
// reclaims whose lender and borrower both remain, a lender never lending
// more than its dedicated part. Sorted by field name. Lent buffer past
// lay's buffer is left to the store: pool_layout.lua cuts it back (the
// shared pool's first, then the lines' in lay's order, as Model.Relayout)
// and answers the cuts, which the caller journals as RETURN events, so a
// later rebuild with a larger buffer does not lend the cut buffer again.
func (m Moves) Fields(lay Layout) [][2]any {
	var out [][2]any
	lend := func(field string, n int64) {
		if n > 0 {
			out = append(out, [2]any{field, n})
		}
	}
	lend("sbuf", m.Buffer[""])
	for _, l := range lay.Lines {
		if w, ok := m.Watermarks[l.Name]; ok {
			out = append(out, [2]any{"w:" + l.Name, min(max(w, WatermarkFloor), MaxWatermark)})
		}
		lend("b:"+l.Name, m.Buffer[l.Name])
	}
	lent, got := map[string]int64{}, map[string]int64{}
	for _, r := range m.Reclaims {
		from, okF := lay.Line(r.From)
		_, okT := lay.Line(r.To)
		if r.State != ReclaimExecuted || r.DryRun || !okF || !okT || r.From == r.To {
			continue
		}
		n := min(r.Amount, from.Dedicated-lent[r.From])
		if n > 0 {
			lent[r.From] += n
			got[r.To] += n
		}
	}
	for _, l := range lay.Lines {
		if n := lent[l.Name]; n > 0 {
			out = append(out, [2]any{"l:" + l.Name, n})
		}
		if n := got[l.Name]; n > 0 {
			out = append(out, [2]any{"r:" + l.Name, n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].(string) < out[j][0].(string) })
	return out
}

// Relayout takes a new layout of the same lines (a new limit or new pool
// settings; pool_layout.lua in the store): each line's tier, dedicated part
// and borrowing limit change, what was moved and what is held stay (a line
// whose tier changed starts again at its new tier's watermark), except
// that buffer lent past the new buffer is cut back — the shared pool's first,
// then the lines' in lay's order, as Moves.Fields bounds a rebuild — so the
// pools never add up to more than the limit. Lines not in m are ignored.
// It returns what was cut back, in that order (Line "" the shared pool's),
// as pool_layout.lua does for its caller to journal (RETURN events, so a
// rebuild from the journal agrees: Cut.Event).
func (m *Model) Relayout(lay Layout) []Cut {
	m.Layout = lay
	left := lay.Buffer
	var cuts []Cut
	cut := func(line string, n int64) int64 {
		k := min(max(n, 0), left)
		left -= k
		if n > k {
			cuts = append(cuts, Cut{Line: line, Amount: n - k})
		}
		return k
	}
	m.SharedBuffer = cut("", m.SharedBuffer)
	for _, l := range lay.Lines {
		if s, ok := m.Lines[l.Name]; ok {
			if s.Tier != l.Tier {
				// A new tier starts at its own watermark (journalled as
				// KindWatermarkTier), not at what the controller had set
				// for the old one.
				s.Watermark = l.Tier.BaseWatermark()
			}
			s.LineLayout = l
			s.Buffer = cut(l.Name, s.Buffer)
		}
	}
	return cuts
}

// Cut is lent buffer cut back by a smaller buffer (Model.Relayout,
// pool_layout.lua): Amount units lent to Line ("" = the shared pool) no
// longer are.
type Cut struct {
	Line   string
	Amount int64
}

// CutReason is the reason of the RETURN event a Cut is journalled as.
const CutReason = "layout: the buffer shrank under what was lent (a smaller bufferPercent or limit): cut back"

// Event is the RETURN pool event that journals c at atMs (Unix ms): PoolMoves
// counts it against what was lent, so a rebuild after Redis loss agrees
// with what the cut left.
func (c Cut) Event(atMs int64) Event {
	return Event{AtMs: atMs, Kind: ReturnKind, Line: c.Line, Amount: c.Amount, Reason: CutReason}
}
