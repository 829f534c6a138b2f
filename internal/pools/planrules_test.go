package pools

import (
	"strings"
	"testing"
)

// The largest-remainder cut counts each line's remainder of rest·weight
// over the total weight: 10 by weights 3 and 4 is 4 r 2 and 5 r 5, so the
// unit left goes to the second line (4 and 6).
func TestPlanRemaindersOfUnequalWeights(t *testing.T) {
	s := Settings{SharedPercent: 0, DedicatedPercent: 100, BufferPercent: 0, BorrowLimitPercent: 50,
		Elasticity: ElasticityOff, ReclaimThresholdPercent: 90}
	lay, err := Plan(10, s, []LineSpec{{Name: "a", Tier: TierCore, Weight: 3}, {Name: "b", Tier: TierCore, Weight: 4}})
	if err != nil || lay.Lines[0].Dedicated != 4 || lay.Lines[1].Dedicated != 6 {
		t.Fatalf("%v %+v; want a 4, b 6", err, lay.Lines)
	}
}

// Shares that do not sum to 100 are refused with the sum they make.
func TestSettingsSumIsStated(t *testing.T) {
	s := DefaultSettings()
	s.BufferPercent = 20
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "must be 100, not 110") {
		t.Fatalf("%v", err)
	}
}

// A refusal is POOL_EXHAUSTED when what the line could still have — its
// dedicated part left, its whole borrowing limit left, the buffer lent to
// it, its grants — covers the apply but the shared pool does not: here a
// has used its 200, may borrow 100, holds 30 of buffer, and the shared pool
// is full; 120 is POOL_EXHAUSTED, 131 LINE_EXHAUSTED.
func TestRefusalReasonCountsLentBuffer(t *testing.T) {
	for _, c := range []struct {
		amount int64
		want   Reason
	}{{120, ReasonPoolExhausted}, {130, ReasonPoolExhausted}, {131, ReasonLineExhausted}} {
		m := twoLines(t, false) // a: 200 dedicated, borrow 100; shared 600
		_ = m.Release("a", 30)
		mustApply(t, m, ApplyReq{SessionID: "fill", Line: "a", Amount: 200, Critical: true})
		m.SharedUsed = m.SharedCap() // b and others filled the shared pool
		if d := mustApply(t, m, ApplyReq{SessionID: "x", Line: "a", Amount: c.amount, Critical: true}); d.Reason != c.want {
			t.Errorf("%d: %+v, want %s", c.amount, d, c.want)
		}
	}
}
