package pools

import (
	"fmt"
	"testing"
)

// Critical work is not refused while buffer no one holds stands outside the
// shared pool (issue 21 §2: CORE critical operations are never refused
// while the resource has quota left; EXPLORE's refusals fall on
// non-critical work first). The code trace's second half on line
// assignment 2 (docs/pools.md §4): a reactive release had lent the whole
// buffer to one CORE line, which held none of it; the shared pool went
// from under 90 % used to empty between two controller ticks, and another
// CORE line's critical apply and EXPLORE's critical applies were refused
// with a tenth of the limit unheld. The apply itself now puts the spare
// buffer into the shared pool before it refuses critical work or a
// continuation; a non-critical apply does not.
func TestCriticalWorkTakesTheSpareBufferBetweenTicks(t *testing.T) {
	specs := []LineSpec{{Name: "c1", Tier: TierCore, Weight: 1}, {Name: "c2", Tier: TierCore, Weight: 1},
		{Name: "e", Tier: TierExplore, Weight: 1}, {Name: "g", Tier: TierGrowth, Weight: 1}}
	setup := func(t *testing.T) *Model {
		t.Helper()
		lay, err := Plan(1200, DefaultSettings(), specs) // shared 720, dedicated 90 each, buffer 120
		if err != nil {
			t.Fatal(err)
		}
		m := NewModel(lay, true)
		if err := m.Release("c1", 120); err != nil { // the whole buffer, as a reactive release lends it
			t.Fatal(err)
		}
		// c2 holds its 90 and 700 of the shared pool; e its 90 and 15.
		for _, a := range []ApplyReq{{SessionID: "c2-0", Line: "c2", Amount: 790, Critical: true},
			{SessionID: "e-0", Line: "e", Amount: 105, Critical: true}} {
			if d := mustApply(t, m, a); d.Reason != "" {
				t.Fatalf("set-up %+v: %+v", a, d)
			}
		}
		if m.SharedFree() != 5 {
			t.Fatalf("set-up: shared pool free %d, want 5", m.SharedFree())
		}
		return m
	}

	m := setup(t)
	// Non-critical work is refused and moves nothing.
	if d := mustApply(t, m, ApplyReq{SessionID: "e-nc", Line: "e", Amount: 10}); d.Reason == "" || m.Lines["c1"].Buffer != 120 {
		t.Fatalf("e's non-critical apply: %+v, c1's buffer %d (want refused, 120 kept)", d, m.Lines["c1"].Buffer)
	}
	// EXPLORE's critical apply: the shared pool has 5, c1 holds none of its
	// 120: granted from the shared pool the buffer was put into.
	if d := mustApply(t, m, ApplyReq{SessionID: "e-1", Line: "e", Amount: 10, Critical: true}); d.Reason != "" || d.Drawn.Shared != 10 {
		t.Fatalf("e's critical apply with 120 of buffer unheld: %+v", d)
	}
	if m.Lines["c1"].Buffer != 0 || m.SharedBuffer != 120 {
		t.Fatalf("c1's buffer %d, shared buffer %d; want 0 and 120", m.Lines["c1"].Buffer, m.SharedBuffer)
	}
	// The other CORE line's critical applies take the rest, to the limit.
	for i := range 115 {
		if d := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("c2-%d", i+1), Line: "c2", Amount: 1, Critical: true}); d.Reason != "" {
			t.Fatalf("c2's critical apply %d refused: %+v (limit room %d)", i, d, m.LimitRoom())
		}
	}
	// What is left is the dedicated parts of c1 and g: theirs.
	if d := mustApply(t, m, ApplyReq{SessionID: "c2-x", Line: "c2", Amount: 1, Critical: true}); d.Reason == "" || m.LimitRoom() != 180 {
		t.Fatalf("c2 past the spare buffer: %+v, limit room %d", d, m.LimitRoom())
	}

	// A CORE critical apply alone, and a continuation of a GROWTH line,
	// take it too; what c1 holds of its buffer stays c1's.
	for _, a := range []ApplyReq{{SessionID: "c2-big", Line: "c2", Amount: 100, Critical: true},
		{SessionID: "g-cont", Line: "g", Amount: 190, Continuation: true}} {
		m := setup(t)
		if d := mustApply(t, m, ApplyReq{SessionID: "c1-0", Line: "c1", Amount: 110, Critical: true}); d.Reason != "" {
			t.Fatalf("c1: %+v", d) // its 90, the 5 left in the shared pool, 15 of its buffer
		}
		held := m.Lines["c1"].UsedBuffer
		if d := mustApply(t, m, a); d.Reason != "" {
			t.Fatalf("%+v refused with buffer unheld: %+v", a, d)
		}
		if m.Lines["c1"].Buffer != held {
			t.Fatalf("%+v: c1's buffer %d, want what it holds (%d)", a, m.Lines["c1"].Buffer, held)
		}
	}
}

// With elasticity OFF the controller decides nothing, but the spare buffer
// an apply put into the shared pool goes back once the pool does not hold
// it (before, Tick returned first and it stayed there for good); what
// sessions hold of it stays until they give it back.
func TestSpareBufferGoesBackUnderElasticityOff(t *testing.T) {
	s := DefaultSettings()
	s.Elasticity = ElasticityOff
	lay, err := Plan(1000, s, []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m, c := NewModel(lay, true), NewController(s, 0)
	c.Released = map[string]int64{}
	// a's 300 dedicated, the 600 shared, then 50 of the 100 spare.
	if d := mustApply(t, m, ApplyReq{SessionID: "big", Line: "a", Amount: 950, Critical: true}); d.Reason != "" || m.SharedBuffer != 100 {
		t.Fatalf("critical apply: %+v, shared buffer %d", d, m.SharedBuffer)
	}
	// The 50 the pool does not hold go back; the 50 it holds stay.
	if evs := c.Tick(m, 0); !same(returns(evs, ""), []int64{50}) || m.SharedBuffer != 50 {
		t.Fatalf("first tick: %v, shared buffer %d; want 50 back, 50 kept", evs, m.SharedBuffer)
	}
	if _, err := m.Finish("big", 0); err != nil {
		t.Fatal(err)
	}
	if evs := c.Tick(m, TickMs); !same(returns(evs, ""), []int64{50}) || m.SharedBuffer != 0 || m.BufferFree() != 100 {
		t.Fatalf("not given back under OFF: %v, shared buffer %d", evs, m.SharedBuffer)
	}
}

// When an apply put a line's unheld reactive buffer into the shared pool,
// the controller forgets it (forgetTaken): the reactive hold ends with it,
// and the watermark is not lowered after the window for buffer the line no
// longer has (the same line without the move is lowered:
// TestReactiveWindowLowersOnlyLinesThatGotBuffer).
func TestTakenReactiveBufferEndsTheHold(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	a := s.m.Lines["a"]
	a.Tier, a.Watermark = TierGrowth, TierGrowth.BaseWatermark()
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs) // the burst: the whole buffer lent to a
	if a.Buffer == 0 {
		t.Fatalf("no reactive release: %v", s.evs)
	}
	if moved := s.m.SpareToShared(""); moved == 0 || a.Buffer != 0 {
		t.Fatalf("moved %d, a's buffer %d", moved, a.Buffer)
	}
	for range 13 { // still twice the rate past the 5-minute window
		s.sample(2250, SampleMs)
	}
	if n := len(eventsOf(s.evs, "WATERMARK_LOWERED")); n != 0 || a.Watermark != TierGrowth.BaseWatermark() {
		t.Fatalf("lowered %d times (watermark %d) with the buffer taken", n, a.Watermark)
	}
	if lc := s.c.lines["a"]; lc.reactLent != 0 || lc.reactiveUntil != 0 {
		t.Fatalf("controller still counts %d lent, hold until %d", lc.reactLent, lc.reactiveUntil)
	}
}

// An apply refused even after the move (one larger than anything the
// resource could grant) leaves the spare buffer where it was: the move is
// made only when the apply then fits by capacity (Model.fitsAfterSpare).
// Before, the oversized critical apply put the whole buffer into the
// shared pool and an operator's buffer release found none free (409)
// until the controller gave it back.
func TestRefusedCriticalApplyLeavesTheBuffer(t *testing.T) {
	lay, err := Plan(10000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}, {Name: "b", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, true)
	if err := m.Release("b", 10); err != nil {
		t.Fatal(err)
	}
	free := m.BufferFree()
	for _, a := range []ApplyReq{{SessionID: "big", Line: "a", Amount: 100000, Critical: true},
		{SessionID: "cont", Line: "a", Amount: 100000, Continuation: true}} {
		if d := mustApply(t, m, a); d.Reason == "" {
			t.Fatalf("%+v granted: %+v", a, d)
		}
		if m.SharedBuffer != 0 || m.BufferFree() != free || m.Lines["b"].Buffer != 10 {
			t.Fatalf("%+v refused moved the buffer: shared %d, free %d (want %d), b's %d", a, m.SharedBuffer, m.BufferFree(), free, m.Lines["b"].Buffer)
		}
	}
	if err := m.Release("a", free); err != nil {
		t.Fatalf("buffer release after the refused apply: %v", err)
	}
}
