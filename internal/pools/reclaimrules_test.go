package pools

import "testing"

// reclaimAt is reclaimWorld with the others' use of the shared pool set to
// others (busy adds its 75, its borrowing limit) and busy holding busy
// (its 150 dedicated first): limit 1000, shared 600, dedicated 150 + 150,
// borrowing limit 75 each, buffer 100 (lent to idle), tiers off.
func reclaimAt(t *testing.T, s Settings, others, busy int64) (*Model, *Controller) {
	t.Helper()
	lay, err := Plan(1000, s, []LineSpec{{Name: "busy", Tier: TierCore, Weight: 1}, {Name: "idle", Tier: TierExplore, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, false)
	m.SharedUsed = others
	// The buffer is lent out (an operator's release to idle): a short
	// shared pool gets none of it (guardShared), so busy's pressure stays.
	if err := m.Release("idle", lay.Buffer); err != nil {
		t.Fatal(err)
	}
	if busy > 0 {
		feed(t, m, "busy", busy, "fill")
	}
	return m, NewController(s, 0)
}

// reactive: the default settings with REACTIVE elasticity, so that no
// buffer is lent ahead of a forecast (which would change what busy may use).
func reactive() Settings {
	s := DefaultSettings()
	s.Elasticity = ElasticityReactive
	return s
}

func warned(evs []Event) []Event { return eventsOf(evs, "RECLAIM_WARNED") }

// Execution re-checks what the lender still leaves unused: all of it used
// meanwhile cancels the reclaim; part of it moves what is left.
func TestReclaimExecutionRechecksWhatIsIdle(t *testing.T) {
	m, ctl := reclaimAt(t, reactive(), 520, 225)
	ctl.Tick(m, 0)
	ctl.Tick(m, 30_000)
	feed(t, m, "idle", 150, "busy-now")
	evs := ctl.Tick(m, 60_000)
	if c := eventsOf(evs, "RECLAIM_CANCELLED"); len(c) != 1 || ctl.Reclaims[0].State != ReclaimCancelled || m.Lines["idle"].Lent != 0 || len(eventsOf(evs, "RECLAIM_EXECUTED")) != 0 {
		t.Fatalf("lender now busy: %v, reclaim %+v", evs, ctl.Reclaims[0])
	}

	m, ctl = reclaimAt(t, reactive(), 520, 225)
	ctl.Tick(m, 0)
	ctl.Tick(m, 30_000)
	feed(t, m, "idle", 130, "most")
	evs = ctl.Tick(m, 60_000)
	// 20 moved; and as the lender now uses more than 75 % of what it owns,
	// the same tick's reclaim step gives them back.
	ex, back := eventsOf(evs, "RECLAIM_EXECUTED"), eventsOf(evs, "GIVE_BACK")
	if len(ex) != 1 || ex[0].Amount != 20 || ex[0].To != "busy" || len(back) != 1 || back[0].Amount != 20 || ctl.Reclaims[0].State != ReclaimReturned {
		t.Fatalf("20 left idle: %v, reclaim %+v", evs, ctl.Reclaims[0])
	}
}

// A line that may use nothing (no dedicated part, no borrowing limit) is
// never the borrower, even with an overage charged to it: there is no
// share of what it may use to be full of.
func TestReclaimNeverTowardsALineThatMayUseNothing(t *testing.T) {
	lay, err := Plan(1000, reactive(), []LineSpec{{Name: "idle", Tier: TierCore, Dedicated: 300}, {Name: "zero", Tier: TierCore, Weight: 1}})
	if err != nil || lay.Lines[1].Dedicated != 0 {
		t.Fatalf("%v %+v", err, lay)
	}
	m := NewModel(lay, false)
	if err := m.AddGrant(Grant{ID: "g", Line: "zero", Amount: 10, ExpiresMs: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	m.SharedUsed = m.SharedCap() // the others filled the shared pool
	if d, _ := m.Apply(ApplyReq{SessionID: "s", Line: "zero", Amount: 10, Critical: true}); d.Granted != 10 {
		t.Fatalf("apply %+v", d)
	}
	if _, err := m.Finish("s", 30); err != nil || m.Lines["zero"].Used() != 20 {
		t.Fatalf("overage: %v, zero %+v", err, m.Lines["zero"])
	}
	m.SharedUsed = m.SharedCap() // the others filled the shared pool
	if evs := NewController(reactive(), 0).Tick(m, 0); len(warned(evs)) != 0 {
		t.Fatalf("reclaim towards a line that may use nothing: %v", evs)
	}
}
