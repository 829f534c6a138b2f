package pools

import (
	"errors"
	"testing"
)

func inputField(err error) string {
	var ie *InputError
	if errors.As(err, &ie) {
		return ie.Field
	}
	return ""
}

// Every setting is refused one past its bound and accepted at it.
func TestSettingsBounds(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   func(*Settings)
		field string // "" = accepted
	}{
		{"defaults", func(*Settings) {}, ""},
		{"shared 0", func(s *Settings) { s.SharedPercent, s.DedicatedPercent = 0, 90 }, ""},
		{"shared 100", func(s *Settings) { s.SharedPercent, s.DedicatedPercent, s.BufferPercent = 100, 0, 0 }, ""},
		{"shared 101", func(s *Settings) { s.SharedPercent, s.DedicatedPercent, s.BufferPercent = 101, -1, 0 }, "pools.sharedPercent"},
		{"dedicated 101", func(s *Settings) { s.SharedPercent, s.DedicatedPercent, s.BufferPercent = 0, 101, -1 }, "pools.dedicatedPercent"},
		{"buffer -1", func(s *Settings) { s.SharedPercent, s.DedicatedPercent, s.BufferPercent = 61, 40, -1 }, "pools.bufferPercent"},
		{"sum 99", func(s *Settings) { s.BufferPercent = 9 }, "pools"},
		{"sum 101", func(s *Settings) { s.BufferPercent = 11 }, "pools"},
		{"borrow 0", func(s *Settings) { s.BorrowLimitPercent = 0 }, ""},
		{"borrow 1000", func(s *Settings) { s.BorrowLimitPercent = 1000 }, ""},
		{"borrow -1", func(s *Settings) { s.BorrowLimitPercent = -1 }, "pools.borrowLimitPercent"},
		{"borrow 1001", func(s *Settings) { s.BorrowLimitPercent = 1001 }, "pools.borrowLimitPercent"},
		{"elasticity OFF", func(s *Settings) { s.Elasticity = ElasticityOff }, ""},
		{"elasticity PREDICTIVE", func(s *Settings) { s.Elasticity = ElasticityPredictive }, ""},
		{"elasticity REACTIVE", func(s *Settings) { s.Elasticity = ElasticityReactive }, ""},
		{"elasticity empty", func(s *Settings) { s.Elasticity = "" }, "pools.elasticity"},
		{"reclaim threshold 1", func(s *Settings) { s.ReclaimThresholdPercent = 1 }, ""},
		{"reclaim threshold 100", func(s *Settings) { s.ReclaimThresholdPercent = 100 }, ""},
		{"reclaim threshold 0", func(s *Settings) { s.ReclaimThresholdPercent = 0 }, "pools.reclaimThresholdPercent"},
		{"reclaim threshold 101", func(s *Settings) { s.ReclaimThresholdPercent = 101 }, "pools.reclaimThresholdPercent"},
		{"confirm 0", func(s *Settings) { s.ReclaimConfirmSeconds = 0 }, ""},
		{"confirm a day", func(s *Settings) { s.ReclaimConfirmSeconds = 86400 }, ""},
		{"confirm -1", func(s *Settings) { s.ReclaimConfirmSeconds = -1 }, "pools.reclaimConfirmSeconds"},
		{"confirm a day and a second", func(s *Settings) { s.ReclaimConfirmSeconds = 86401 }, "pools.reclaimConfirmSeconds"},
	} {
		s := DefaultSettings()
		c.set(&s)
		if err := s.Validate(); inputField(err) != c.field || (c.field == "" && err != nil) {
			t.Errorf("%s: %v, want field %q", c.name, err, c.field)
		}
	}
	if d := DefaultSettings(); d.SharedPercent != 60 || d.DedicatedPercent != 30 || d.BufferPercent != 10 ||
		d.BorrowLimitPercent != 50 || d.Elasticity != ElasticityAuto || d.ReclaimThresholdPercent != 90 || d.ReclaimConfirmSeconds != 30 {
		t.Fatalf("defaults %+v, want seed 003's 60/30/10, borrow 50 %%, AUTO, reclaim at 90 %% after 30 s", d)
	}
}

func TestLineSpecBounds(t *testing.T) {
	for _, c := range []struct {
		spec  LineSpec
		field string
	}{
		{LineSpec{Name: "a", Tier: TierCore, Weight: 1}, ""},
		{LineSpec{Name: "a", Tier: TierGrowth, Weight: 1000}, ""},
		{LineSpec{Name: "a", Tier: TierExplore, Weight: 1001}, "weight"},
		{LineSpec{Name: "a", Tier: TierCore, Weight: -1}, "weight"},
		{LineSpec{Name: "a", Tier: TierCore, Dedicated: 1}, ""},
		{LineSpec{Name: "a", Tier: TierCore, Dedicated: MaxAmount}, ""},
		{LineSpec{Name: "a", Tier: TierCore, Dedicated: MaxAmount + 1}, "dedicated"},
		{LineSpec{Name: "a", Tier: TierCore, Weight: 1, Dedicated: 1}, "weight"},
		{LineSpec{Name: "", Tier: TierCore, Weight: 1}, "businessLine"},
		{LineSpec{Name: "a", Tier: "", Weight: 1}, "tier"},
	} {
		if err := c.spec.Validate(); inputField(err) != c.field || (c.field == "" && err != nil) {
			t.Errorf("%+v: %v, want field %q", c.spec, err, c.field)
		}
	}
	for tier, wm := range map[Tier]int64{TierCore: 9500, TierGrowth: 8000, TierExplore: 6000, "GOLD": 0} {
		if tier.BaseWatermark() != wm || tier.Valid() != (wm > 0) {
			t.Errorf("%s: watermark %d, want %d", tier, tier.BaseWatermark(), wm)
		}
	}
}

// Plan refuses a limit outside 0 … 2^53−1 and more than MaxLines lines;
// the largest remainders get the units the floor left over, ties to the
// earlier name, and the pools always sum to the limit.
func TestPlanBoundsAndRemainders(t *testing.T) {
	one := []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}}
	for _, limit := range []int64{-1, MaxAmount + 1} {
		if _, err := Plan(limit, DefaultSettings(), one); inputField(err) != "totalLimit" {
			t.Errorf("limit %d: %v", limit, err)
		}
	}
	for _, limit := range []int64{0, MaxAmount} {
		lay, err := Plan(limit, DefaultSettings(), one)
		if err != nil || lay.Shared+lay.Dedicated+lay.Buffer != limit {
			t.Errorf("limit %d: %+v, %v; the pools must sum to the limit", limit, lay, err)
		}
	}
	many := LineNames(MaxLines + 1)
	if _, err := Plan(1000, DefaultSettings(), many); inputField(err) != "businessLine" {
		t.Fatalf("%d lines: %v", len(many), err)
	}
	if _, err := Plan(1000, DefaultSettings(), many[:MaxLines]); err != nil {
		t.Fatalf("%d lines: %v", MaxLines, err)
	}
	// 10 units by weights 1:2:4 → 1.43, 2.86, 5.71: floors 1, 2, 5, and the
	// two left over go to the largest remainders (b's 6/7, then c's 5/7).
	s := Settings{DedicatedPercent: 100, BorrowLimitPercent: 50, Elasticity: ElasticityOff, ReclaimThresholdPercent: 90}
	lay, err := Plan(10, s, []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}, {Name: "b", Tier: TierCore, Weight: 2}, {Name: "c", Tier: TierCore, Weight: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if got := [3]int64{lay.Lines[0].Dedicated, lay.Lines[1].Dedicated, lay.Lines[2].Dedicated}; got != [3]int64{1, 3, 6} {
		t.Fatalf("dedicated %v", got)
	}
	// Equal remainders: the earlier name first, whatever the order given.
	lay, _ = Plan(2, s, []LineSpec{{Name: "z", Tier: TierCore, Weight: 1}, {Name: "m", Tier: TierCore, Weight: 1}, {Name: "a", Tier: TierCore, Weight: 1}})
	if got := [3]int64{lay.Lines[0].Dedicated, lay.Lines[1].Dedicated, lay.Lines[2].Dedicated}; got != [3]int64{1, 1, 0} {
		t.Fatalf("ties: %v, want a and m to get the two units", got)
	}
	if l, ok := lay.Line("m"); !ok || l.Dedicated != 1 {
		t.Fatalf("Line(m) = %+v, %v", l, ok)
	}
	if _, ok := lay.Line("b"); ok {
		t.Fatal("Line found a line that is not there")
	}
	// The exact product for large limits: ⌊limit·w/Σw⌋ with no overflow.
	big, err := Plan(MaxAmount, s, []LineSpec{{Name: "a", Tier: TierCore, Weight: 1000}, {Name: "b", Tier: TierCore, Weight: 999}})
	if err != nil || big.Lines[0].Dedicated+big.Lines[1].Dedicated != MaxAmount || big.Lines[0].Dedicated <= big.Lines[1].Dedicated {
		t.Fatalf("big: %+v, %v", big, err)
	}
}

// A session's draws from each grant survive their stored form.
func TestGrantDrawsRoundTrip(t *testing.T) {
	gs := []GrantDraw{{ID: "g1", Amount: 5}, {ID: "promo-2", Amount: 12}}
	s := FormatGrants(gs)
	if s != "g1=5;promo-2=12" {
		t.Fatalf("format %q", s)
	}
	back := ParseGrants(s)
	if len(back) != 2 || back[0] != gs[0] || back[1] != gs[1] {
		t.Fatalf("parse %v", back)
	}
	if FormatGrants(nil) != "" || ParseGrants("") != nil {
		t.Fatal("no grants is the empty string")
	}
	if one := ParseGrants("g=7"); len(one) != 1 || one[0] != (GrantDraw{ID: "g", Amount: 7}) {
		t.Fatalf("one grant: %v", one)
	}
	d := Drawn{Base: 1, Dedicated: 2, Shared: 4, Buffer: 8, Grant: 16}
	if d.Total() != 31 {
		t.Fatalf("total %d, want the sum of every pool", d.Total())
	}
}

// Each controller decision that moves quota becomes one store move; a
// dry-run reclaim and the bookkeeping events move nothing.
func TestMoveOfEvents(t *testing.T) {
	for _, c := range []struct {
		ev   Event
		move Move
		ok   bool
	}{
		{Event{Kind: "LEND_PREDICTIVE", Line: "a", Amount: 5}, Move{Op: "release", Line: "a", Amount: 5}, true},
		{Event{Kind: "LEND_REACTIVE", Line: "a", Amount: 6}, Move{Op: "release", Line: "a", Amount: 6}, true},
		{Event{Kind: "RETURN", Line: "a", Amount: 2}, Move{Op: "return", Line: "a", Amount: 2}, true},
		{Event{Kind: "WATERMARK_RAISED", Line: "a", Amount: 8500}, Move{Op: "watermark", Line: "a", Amount: 8500}, true},
		{Event{Kind: "WATERMARK_LOWERED", Line: "a", Amount: 7500}, Move{Op: "watermark", Line: "a", Amount: 7500}, true},
		{Event{Kind: "WATERMARK_DECAYED", Line: "a", Amount: 8000}, Move{Op: "watermark", Line: "a", Amount: 8000}, true},
		{Event{Kind: "RECLAIM_EXECUTED", Line: "a", To: "b", Amount: 3}, Move{Op: "reclaim", Line: "a", To: "b", Amount: 3}, true},
		{Event{Kind: "RECLAIM_EXECUTED", Line: "a", Amount: 3}, Move{}, false},
		{Event{Kind: "GIVE_BACK", Line: "a", To: "b", Amount: 1}, Move{Op: "giveback", Line: "a", To: "b", Amount: 1}, true},
		{Event{Kind: "MODE", Line: "a"}, Move{}, false},
		{Event{Kind: "MODE", Line: "a", Mode: ModeReactive}, Move{Op: "mode", Line: "a", Mode: ModeReactive}, true},
		{Event{Kind: "RECLAIM_WARNED", Line: "a", Amount: 3}, Move{}, false},
	} {
		if m, ok := MoveOf(c.ev); m != c.move || ok != c.ok {
			t.Errorf("%+v: %+v, %v; want %+v, %v", c.ev, m, ok, c.move, c.ok)
		}
	}
}
