package pools

import (
	"cmp"
	"slices"
)

// ReleasesHeld sets Held of every buffer release in gs that is in force at
// now (Unix ms: not voided, not expired) to what its line (Line "": the
// shared pool) still holds of it in m: the buffer lent to the line now
// (LineState.Buffer; the shared pool's SharedBuffer) is counted against
// the line's releases newest first (CreatedMs, then ID, descending), each
// at most its Amount. A spare move (SpareToShared) lends on all a line
// does not hold, so what it still has after one is the later releases'
// first: a release made after the move is held whole, those before it
// only as far as the line's sessions kept the buffer. A release's Held may
// thus be below its Amount, down to 0; a void gives back at most its Held
// (admin.Pools.VoidGrant), never another release's part. Buffer the
// controller lent (elasticity) is not told apart: it may be counted as a
// release's. Every other record's Held is set to 0; a line m does not
// know holds 0.
func ReleasesHeld(gs []GrantRecord, m *Model, now int64) {
	left := map[string]int64{"": m.SharedBuffer}
	for name, l := range m.Lines {
		left[name] = l.Buffer
	}
	var in []int
	for i := range gs {
		gs[i].Held = 0
		g := &gs[i]
		if g.Kind == KindRelease && !g.Voided && g.VoidedMs == 0 && now < g.ExpiresMs {
			in = append(in, i)
		}
	}
	slices.SortFunc(in, func(a, b int) int {
		return cmp.Or(cmp.Compare(gs[b].CreatedMs, gs[a].CreatedMs), cmp.Compare(gs[b].ID, gs[a].ID))
	})
	for _, i := range in {
		h := min(gs[i].Amount, max(0, left[gs[i].Line]))
		gs[i].Held = h
		left[gs[i].Line] -= h
	}
}
