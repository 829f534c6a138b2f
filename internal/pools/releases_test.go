package pools

import "testing"

// A line's lent buffer is counted against its releases newest first, each
// at most its amount; a spare move that lent on what the line did not hold
// leaves its releases held below their amounts (docs/pools.md §5, finding
// 6); the shared pool's releases count its buffer; voided and expired
// releases and grants hold nothing.
func TestReleasesHeldCountsWhatTheLineStillHas(t *testing.T) {
	lay, err := Plan(1000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}, {Name: "b", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, true)
	m.Lines["a"].Buffer, m.Lines["b"].Buffer, m.SharedBuffer = 30, 0, 25
	rel := func(id, line string, amount, created int64) GrantRecord {
		return GrantRecord{Grant: Grant{ID: id, Line: line, Amount: amount, ExpiresMs: MaxAmount}, Kind: KindRelease, CreatedMs: created}
	}
	gs := []GrantRecord{
		rel("a-new", "a", 20, 200), rel("a-old", "a", 20, 100), rel("b1", "b", 40, 100), rel("s1", "", 10, 100),
		rel("gone", "a", 5, 50), rel("late", "a", 5, 60),
		{Grant: Grant{ID: "g1", Line: "a", Amount: 70, ExpiresMs: MaxAmount}, Kind: KindGrant, CreatedMs: 10},
	}
	gs[4].VoidedMs = 70   // voided: holds nothing
	gs[5].ExpiresMs = 900 // expired at now
	ReleasesHeld(gs, m, 900)
	want := map[string]int64{"a-old": 10, "a-new": 20, "b1": 0, "s1": 10, "gone": 0, "late": 0, "g1": 0}
	for _, g := range gs {
		if g.Held != want[g.ID] {
			t.Errorf("%s held %d, want %d", g.ID, g.Held, want[g.ID])
		}
	}
}
