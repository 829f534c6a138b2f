package admin_test

import (
	"testing"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestABufferCutIsJournalledAsReturns: a smaller buffer cuts the lent
// buffer back (pool_layout.lua), and what it cut is journalled as RETURN
// pool events, as a voided release's returned buffer is: the event stream
// shows it, and a rebuild after Redis lost the pools (PoolMoves) lends what
// the cut left, not what was lent before it. The cut changed the balance
// and the journal said nothing.
func TestABufferCutIsJournalledAsReturns(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	a := poolAdmin(w)
	// Buffer 10 000: 3 000 to the shared pool, 6 000 to a.
	for _, r := range []admin.GrantRequest{{Amount: 3000, Reason: "shared"}, {Amount: 6000, Line: "a", Reason: "a"}} {
		if _, err := a.Release(w.Ctx, "llm", r); err != nil {
			t.Fatal(err)
		}
	}
	// Buffer 5 000: the shared pool keeps 3 000, a 2 000 (4 000 cut).
	set := pools.DefaultSettings()
	set.Elasticity = pools.ElasticityOff
	set.DedicatedPercent, set.BufferPercent = 35, 5
	if _, err := a.PutSettings(w.Ctx, "llm", set); err != nil {
		t.Fatal(err)
	}
	if m := w.Model(t); m.SharedBuffer != 3000 || m.Lines["a"].Buffer != 2000 {
		t.Fatalf("after the cut: shared buffer %d, a's %d, want 3000 and 2000", m.SharedBuffer, m.Lines["a"].Buffer)
	}
	evs, err := a.Events(w.Ctx, "llm", 10)
	if err != nil {
		t.Fatal(err)
	}
	var cut []pools.PoolEvent
	for _, e := range evs {
		if e.Kind == pools.ReturnKind {
			cut = append(cut, e)
		}
	}
	if len(cut) != 1 || cut[0].Line != "a" || cut[0].Amount != 4000 || cut[0].Reason != pools.CutReason {
		t.Fatalf("RETURN events %+v, want one of 4000 from a (of %+v)", cut, evs)
	}
	mv, err := w.DB.PoolMoves(w.Ctx, "llm")
	if err != nil || mv.Buffer[""] != 3000 || mv.Buffer["a"] != 2000 {
		t.Fatalf("rebuilt moves %+v %v, want 3000 to the shared pool and 2000 to a", mv.Buffer, err)
	}
	// A second write of the same layout cuts nothing more and journals nothing.
	if _, err := a.PutSettings(w.Ctx, "llm", set); err != nil {
		t.Fatal(err)
	}
	if again, _ := a.Events(w.Ctx, "llm", 10); len(again) != len(evs) {
		t.Fatalf("an unchanged layout journalled %d more events", len(again)-len(evs))
	}
}
