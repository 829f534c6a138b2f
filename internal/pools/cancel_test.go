package pools

import "testing"

// A cancelled session (its ledger row was not written) gives its whole
// grant back to the pools it drew from: the line holds what it held before,
// the grant is free again, and a second cancel changes nothing. Consumed
// (the controller's all-periods counter of grants) keeps it.
func TestCancelGivesTheWholeGrantBackToItsPools(t *testing.T) {
	m := twoLines(t, false)
	if err := m.AddGrant(Grant{ID: "g", Line: "a", Amount: 40, EffectiveMs: 0, ExpiresMs: 100}); err != nil {
		t.Fatal(err)
	}
	_ = m.Release("a", 20)
	mustApply(t, m, ApplyReq{SessionID: "keep", Line: "a", Amount: 50, Critical: true, Now: 5})
	m.SharedUsed = 400 // the others hold 400: half of the 200 free is a's borrowing limit, 100
	before := *m.Lines["a"]
	shared := m.SharedUsed
	d := mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 300, Critical: true, Now: 5})
	if d.Drawn.Dedicated != 150 || d.Drawn.Shared != 100 || d.Drawn.Buffer != 20 || d.Drawn.Grant != 30 {
		t.Fatalf("drawn %+v, want 150/100/20/30", d.Drawn)
	}
	if !m.Cancel("1") {
		t.Fatal("cancel of a granted session reported nothing given back")
	}
	a := *m.Lines["a"]
	a.Consumed = before.Consumed // counts every grant, as the controller's rates do
	if a != before || m.SharedUsed != shared || m.grant("g").Used != 0 {
		t.Fatalf("after cancel: line %+v shared %d grant used %d\nbefore: %+v shared %d", a, m.SharedUsed, m.grant("g").Used, before, shared)
	}
	if m.Cancel("1") {
		t.Fatal("a second cancel gave back again")
	}
	// The id applies afresh.
	if d := mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 10, Critical: true, Now: 5}); d.Granted != 10 || d.Drawn.Dedicated != 10 {
		t.Fatalf("apply after cancel: %+v", d)
	}
}

// Finished and swept sessions are not cancelled: what they are charged
// stays charged.
func TestCancelLeavesFinishedAndSweptSessions(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "f", Line: "b", Amount: 30, Critical: true})
	mustApply(t, m, ApplyReq{SessionID: "s", Line: "b", Amount: 40, Critical: true})
	if _, err := m.Finish("f", 20); err != nil {
		t.Fatal(err)
	}
	if err := m.Sweep("s"); err != nil {
		t.Fatal(err)
	}
	if m.Cancel("f") || m.Cancel("s") || m.Cancel("nobody") {
		t.Fatal("cancel of a finished, swept or unknown session reported a give-back")
	}
	if b := m.Lines["b"]; b.UsedDedicated != 60 || b.Charged != 60 {
		t.Fatalf("line b %+v, want 60 held and charged", b)
	}
}

// A resource without lines gives back what it drew from the limit and
// from grants.
func TestCancelWithoutLines(t *testing.T) {
	lay, err := Plan(100, DefaultSettings(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, true)
	if err := m.AddGrant(Grant{ID: "g", Amount: 50, EffectiveMs: 0, ExpiresMs: 10}); err != nil {
		t.Fatal(err)
	}
	d := mustApply(t, m, ApplyReq{SessionID: "1", Amount: 120, Now: 1})
	if d.Drawn.Base != 100 || d.Drawn.Grant != 20 {
		t.Fatalf("drawn %+v", d.Drawn)
	}
	if !m.Cancel("1") || m.BaseUsed != 0 || m.grant("g").Used != 0 {
		t.Fatalf("after cancel: base used %d, grant used %d", m.BaseUsed, m.grant("g").Used)
	}
}
