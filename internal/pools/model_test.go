package pools

import (
	"errors"
	"fmt"
	"testing"
)

// twoLines: limit 1000 → shared 600, buffer 100; a (CORE) 200 dedicated,
// borrow cap 100; b (EXPLORE) 100 dedicated, borrow cap 50.
func twoLines(t *testing.T, watermarks bool) *Model {
	t.Helper()
	lay, err := Plan(1000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierCore, Weight: 2}, {Name: "b", Tier: TierExplore, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return NewModel(lay, watermarks)
}

func mustApply(t *testing.T, m *Model, r ApplyReq) Decision {
	t.Helper()
	d, err := m.Apply(r)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestApplyDrawsDedicatedThenSharedUpToTheBorrowLimit(t *testing.T) {
	m := twoLines(t, false)
	m.SharedUsed = 400 // other lines hold 400 of the 600
	d := mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 250, Critical: true})
	if d.Reason != "" || d.Drawn.Dedicated != 200 || d.Drawn.Shared != 50 {
		t.Fatalf("first apply: %+v, want 200 dedicated + 50 shared", d)
	}
	// 150 free: a may borrow the larger of its limit's 50 left and half of
	// what is free, 75.
	d = mustApply(t, m, ApplyReq{SessionID: "2", Line: "a", Amount: 76, Critical: true})
	if d.Reason != ReasonLineExhausted {
		t.Fatalf("past half of what is free: %+v, want LINE_EXHAUSTED", d)
	}
	d = mustApply(t, m, ApplyReq{SessionID: "3", Line: "a", Amount: 80, Min: 10, Critical: true})
	if d.Granted != 75 || d.Drawn.Shared != 75 {
		t.Fatalf("partial grant: %+v, want 75 from shared", d)
	}
	if m.SharedUsed != 525 || m.Lines["b"].Used() != 0 {
		t.Fatalf("shared used %d, b used %d", m.SharedUsed, m.Lines["b"].Used())
	}
}

func TestApplyNeverTakesAnotherLinesDedicatedPart(t *testing.T) {
	lay, _ := Plan(1000, Settings{SharedPercent: 10, DedicatedPercent: 80, BufferPercent: 10, BorrowLimitPercent: 1000,
		Elasticity: ElasticityOff, ReclaimThresholdPercent: 90}, []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}, {Name: "b", Tier: TierCore, Weight: 1}})
	m := NewModel(lay, false)
	mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 500, Critical: true})
	d := mustApply(t, m, ApplyReq{SessionID: "2", Line: "a", Amount: 1, Critical: true})
	if d.Reason != ReasonPoolExhausted {
		t.Fatalf("a with b's 400 dedicated unused: %+v, want POOL_EXHAUSTED", d)
	}
	if got := m.Reclaim("b", "a", 100); got != 100 {
		t.Fatalf("reclaim moved %d", got)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "3", Line: "a", Amount: 100, Critical: true}); d.Drawn.Dedicated != 100 {
		t.Fatalf("after a reclaim of 100: %+v, want 100 dedicated", d)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "4", Line: "b", Amount: 301, Critical: true}); d.Reason != ReasonPoolExhausted {
		t.Fatalf("b after lending 100: %+v, want refused", d)
	}
}

func TestBufferOnlyThroughRelease(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "1", Line: "b", Amount: 150, Critical: true})
	m.SharedUsed = m.SharedCap() // the others filled the shared pool
	if d := mustApply(t, m, ApplyReq{SessionID: "2", Line: "b", Amount: 10, Critical: true}); d.Reason != ReasonLineExhausted {
		t.Fatalf("before release: %+v", d)
	}
	if err := m.Release("b", 30); err != nil {
		t.Fatal(err)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "3", Line: "b", Amount: 10, Critical: true}); d.Drawn.Buffer != 10 {
		t.Fatalf("after release: %+v, want 10 from buffer", d)
	}
	if err := m.Release("", 71); err == nil {
		t.Fatal("released more than the free buffer (70)")
	}
	if got := m.Return("b", 100); got != 20 {
		t.Fatalf("returned %d, want the 20 b does not hold", got)
	}
}

func TestRefundsGoBackToThePoolsTheyCameFrom(t *testing.T) {
	m := twoLines(t, false)
	if err := m.AddGrant(Grant{ID: "g", Line: "a", Amount: 40, EffectiveMs: 0, ExpiresMs: 100}); err != nil {
		t.Fatal(err)
	}
	_ = m.Release("a", 20)
	m.SharedUsed = 400 // the others hold 400: a may borrow 100
	d := mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 350, Critical: true, Now: 5})
	if d.Drawn.Dedicated != 200 || d.Drawn.Shared != 100 || d.Drawn.Buffer != 20 || d.Drawn.Grant != 30 {
		t.Fatalf("drawn %+v, want 200/100/20/30", d.Drawn)
	}
	out, err := m.Finish("1", 260)
	if err != nil {
		t.Fatal(err)
	}
	// 90 back: 30 to the grant, 20 to the buffer, 40 to shared.
	if out.Refunded != 90 || out.Charged.Grant != 0 || out.Charged.Buffer != 0 || out.Charged.Shared != 60 || out.Charged.Dedicated != 200 {
		t.Fatalf("finish %+v", out)
	}
	a := m.Lines["a"]
	if a.UsedShared != 60 || a.UsedBuffer != 0 || a.UsedGrant != 0 || m.SharedUsed != 460 || m.grant("g").Used != 0 || a.Charged != 260 || a.Reserved != 0 {
		t.Fatalf("after finish: line %+v shared %d grant %d", a, m.SharedUsed, m.grant("g").Used)
	}
	if _, err := m.Finish("1", 261); !errors.Is(err, ErrConflict) {
		t.Fatalf("second finish with another amount: %v", err)
	}
}

func TestOverageChargesTheLinesDedicatedPart(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "1", Line: "b", Amount: 50, Critical: true})
	out, _ := m.Finish("1", 130)
	if out.Overage != 80 || m.Lines["b"].UsedDedicated != 130 {
		t.Fatalf("overage %d, dedicated used %d", out.Overage, m.Lines["b"].UsedDedicated)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "2", Line: "b", Amount: 50, Critical: true}); d.Drawn.Shared != 50 || d.Drawn.Dedicated != 0 {
		t.Fatalf("after overage: %+v, want shared only", d)
	}
}

func TestGrantsExpiringFirstAreUsedFirst(t *testing.T) {
	lay, _ := Plan(100, DefaultSettings(), nil)
	m := NewModel(lay, false)
	_ = m.AddGrant(Grant{ID: "late", Amount: 50, EffectiveMs: 0, ExpiresMs: 2000})
	_ = m.AddGrant(Grant{ID: "soon", Amount: 50, EffectiveMs: 0, ExpiresMs: 1000})
	_ = m.AddGrant(Grant{ID: "future", Amount: 50, EffectiveMs: 5000, ExpiresMs: 9000})
	d := mustApply(t, m, ApplyReq{SessionID: "1", Amount: 201, Now: 10})
	if d.Reason != ReasonExhausted {
		t.Fatalf("201 of 100+50+50: %+v", d)
	}
	d = mustApply(t, m, ApplyReq{SessionID: "2", Amount: 160, Now: 10})
	if d.Drawn.Base != 100 || len(d.Drawn.Grants) != 2 || d.Drawn.Grants[0] != (GrantDraw{"soon", 50}) || d.Drawn.Grants[1] != (GrantDraw{"late", 10}) {
		t.Fatalf("drawn %+v", d.Drawn)
	}
	// At 1000 "soon" has expired: what was charged to it stays, nothing more.
	if d := mustApply(t, m, ApplyReq{SessionID: "3", Amount: 41, Now: 1000}); d.Reason != ReasonExhausted {
		t.Fatalf("after soon expired: %+v", d)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "4", Amount: 40, Now: 1000}); d.Drawn.Grant != 40 {
		t.Fatalf("late's rest: %+v", d)
	}
	_ = m.VoidGrant("late")
	if d := mustApply(t, m, ApplyReq{SessionID: "5", Amount: 1, Now: 1000}); d.Reason != ReasonExhausted {
		t.Fatalf("after void: %+v", d)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "6", Amount: 50, Now: 5000}); d.Drawn.Grants[0].ID != "future" {
		t.Fatalf("future grant from its start: %+v", d)
	}
}

func TestAddGrantRefusesBadInput(t *testing.T) {
	m := twoLines(t, false)
	for _, g := range []Grant{
		{ID: "", Amount: 1, ExpiresMs: 1},
		{ID: "x", Amount: 0, ExpiresMs: 1},
		{ID: "x", Amount: -5, ExpiresMs: 1},
		{ID: "x", Amount: 1, EffectiveMs: 10, ExpiresMs: 10},
		{ID: "x", Amount: 1, ExpiresMs: 10, Line: "nope"},
	} {
		if err := m.AddGrant(g); err == nil {
			t.Errorf("AddGrant(%+v) accepted", g)
		}
	}
	if len(m.Grants) != 0 {
		t.Fatalf("bad grants were recorded: %v", m.Grants)
	}
}

func TestCoreCriticalIsNeverRefusedWhileQuotaRemains(t *testing.T) {
	m := twoLines(t, true)
	// CORE critical: its 200 dedicated, the whole shared pool, past its
	// borrowing limit (100) and its watermark, and then the buffer no one
	// holds (100, put into the shared pool: Model.SpareToShared).
	for i := range 900 {
		d := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("c%d", i), Line: "a", Amount: 1, Critical: true})
		if d.Reason != "" {
			t.Fatalf("critical apply %d refused with %s while %d of 800 used", i, d.Reason, m.Lines["a"].Used())
		}
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "x", Line: "a", Amount: 1, Critical: true}); d.Reason != ReasonLineExhausted || m.SharedBuffer != 100 {
		t.Fatalf("past what a may use (b's dedicated part is b's): %+v, shared buffer %d", d, m.SharedBuffer)
	}
	m2 := twoLines(t, true)
	mustApply(t, m2, ApplyReq{SessionID: "fill", Line: "a", Amount: 300, Critical: true})
	if _, err := m2.Finish("fill", 300); err != nil {
		t.Fatal(err)
	}
	// 20 free: a non-critical apply may borrow 10, so a reaches 310 and
	// uses 300 (96.8 %); between 95 % and 97.5 % non-critical applies are
	// refused in proportion: 71 %.
	m2.SharedUsed = m2.SharedCap() - 20
	n := 0
	for i := range 100 {
		if d := mustApply(t, m2, ApplyReq{SessionID: fmt.Sprintf("p%d", i), Line: "a", Amount: 1}); d.Reason == ReasonWatermark {
			n++
		} else {
			if _, err := m2.Finish(fmt.Sprintf("p%d", i), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n == 0 || n == 100 {
		t.Fatalf("non-critical CORE applies refused %d of 100 above the watermark", n)
	}
}

func TestSweepKeepsTheGrantChargedAndLateFinishTruesUp(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 250, Critical: true})
	_ = m.Sweep("1")
	a := m.Lines["a"]
	if a.Charged != 250 || a.Reserved != 0 || a.UsedShared != 50 {
		t.Fatalf("after sweep: %+v", a)
	}
	if _, err := m.Finish("1", 100); err != nil {
		t.Fatal(err)
	}
	if a.Charged != 100 || a.Reserved != 0 || a.UsedShared != 0 || a.UsedDedicated != 100 || m.SharedUsed != 0 {
		t.Fatalf("after late finish: %+v", a)
	}
}

func TestNewPeriodEmptiesThePoolsButKeepsMoves(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 250, Critical: true})
	_ = m.Release("a", 10)
	m.NewPeriod(1)
	if m.SharedUsed != 0 || m.Lines["a"].Used() != 0 || m.Lines["a"].Buffer != 10 {
		t.Fatalf("after NewPeriod: shared %d line %+v", m.SharedUsed, m.Lines["a"])
	}
	if _, err := m.Finish("1", 0); err != nil || m.Lines["a"].Used() != 0 || m.SharedUsed != 0 {
		t.Fatalf("finishing an old period's session touched the new period: %v %+v", err, m.Lines["a"])
	}
}

func TestUnknownLine(t *testing.T) {
	m := twoLines(t, false)
	if _, err := m.Apply(ApplyReq{SessionID: "1", Line: "zz", Amount: 1}); !errors.Is(err, ErrUnknownLine) {
		t.Fatalf("err = %v", err)
	}
	lay, _ := Plan(10, DefaultSettings(), nil)
	if _, err := NewModel(lay, false).Apply(ApplyReq{SessionID: "1", Line: "a", Amount: 1}); !errors.Is(err, ErrUnknownLine) {
		t.Fatalf("line on a plain resource: %v", err)
	}
}
