package pools

import (
	"errors"
	"testing"
)

func TestPlanSplitsTheLimitExactly(t *testing.T) {
	specs := []LineSpec{{Name: "b", Tier: TierGrowth, Weight: 1}, {Name: "a", Tier: TierCore, Weight: 2}, {Name: "c", Tier: TierExplore, Dedicated: 7}}
	lay, err := Plan(1001, DefaultSettings(), specs)
	if err != nil {
		t.Fatal(err)
	}
	// shared ⌊600.6⌋ = 600, buffer ⌊100.1⌋ = 100, dedicated pool 301: c takes 7, 294 by weight 2:1.
	if lay.Shared != 600 || lay.Buffer != 100 || lay.Dedicated != 301 {
		t.Fatalf("pools = %d/%d/%d, want 600/301/100", lay.Shared, lay.Dedicated, lay.Buffer)
	}
	want := map[string][2]int64{"a": {196, 98}, "b": {98, 49}, "c": {7, 3}}
	for _, l := range lay.Lines {
		if w := want[l.Name]; l.Dedicated != w[0] || l.BorrowCap != w[1] {
			t.Errorf("%s: dedicated %d borrowCap %d, want %v", l.Name, l.Dedicated, l.BorrowCap, w)
		}
	}
	if lay.Lines[0].Name != "a" {
		t.Errorf("lines not sorted by name: %v", lay.Lines)
	}
}

func TestPlanLargestRemainderGivesEveryUnit(t *testing.T) {
	specs := []LineSpec{{Name: "x", Tier: TierCore, Weight: 1}, {Name: "y", Tier: TierCore, Weight: 1}, {Name: "z", Tier: TierCore, Weight: 1}}
	lay, err := Plan(100, Settings{SharedPercent: 0, DedicatedPercent: 100, BorrowLimitPercent: 50, Elasticity: ElasticityOff, ReclaimThresholdPercent: 90}, specs)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int64{lay.Lines[0].Dedicated, lay.Lines[1].Dedicated, lay.Lines[2].Dedicated}; got[0] != 34 || got[1] != 33 || got[2] != 33 {
		t.Fatalf("dedicated = %v, want [34 33 33] (ties to the earlier name)", got)
	}
}

func TestPlanWithoutWeightedLinesGivesTheRestToShared(t *testing.T) {
	lay, err := Plan(1000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierCore, Dedicated: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if lay.Shared != 800 || lay.Dedicated != 100 || lay.Buffer != 100 {
		t.Fatalf("pools = %d/%d/%d, want 800/100/100", lay.Shared, lay.Dedicated, lay.Buffer)
	}
}

func TestPlanRefusesBadInput(t *testing.T) {
	ok := []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}}
	s := DefaultSettings()
	tests := []struct {
		name  string
		s     func(*Settings)
		lines []LineSpec
		field string
	}{
		{"shares not summing to 100", func(s *Settings) { s.BufferPercent = 20 }, ok, "pools"},
		{"negative share", func(s *Settings) { s.SharedPercent = -10; s.DedicatedPercent = 100; s.BufferPercent = 10 }, ok, "pools.sharedPercent"},
		{"borrow limit too high", func(s *Settings) { s.BorrowLimitPercent = 1001 }, ok, "pools.borrowLimitPercent"},
		{"unknown elasticity", func(s *Settings) { s.Elasticity = "SOMETIMES" }, ok, "pools.elasticity"},
		{"unknown tier", nil, []LineSpec{{Name: "a", Tier: "GOLD", Weight: 1}}, "tier"},
		{"weight zero", nil, []LineSpec{{Name: "a", Tier: TierCore}}, "weight"},
		{"weight and dedicated", nil, []LineSpec{{Name: "a", Tier: TierCore, Weight: 1, Dedicated: 5}}, "weight"},
		{"negative dedicated", nil, []LineSpec{{Name: "a", Tier: TierCore, Dedicated: -5}}, "dedicated"},
		{"bad name", nil, []LineSpec{{Name: "A b", Tier: TierCore, Weight: 1}}, "businessLine"},
		{"duplicate", nil, []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}, {Name: "a", Tier: TierGrowth, Weight: 1}}, "businessLine"},
		{"explicit above the pool", nil, []LineSpec{{Name: "a", Tier: TierCore, Dedicated: 301}}, "dedicated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := s
			if tt.s != nil {
				tt.s(&s)
			}
			_, err := Plan(1000, s, tt.lines)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tt.field {
				t.Fatalf("err = %v, want an InputError on %s", err, tt.field)
			}
		})
	}
}
