package pools

import (
	"strings"
	"testing"
)

// reclaimAt is reclaimWorld with the others' use of the shared pool set to
// others (busy adds its 75, its borrowing limit) and busy holding busy
// (its 150 dedicated first): limit 1000, shared 600, dedicated 150 + 150,
// borrowing limit 75 each, buffer 100, tiers off.
func reclaimAt(t *testing.T, s Settings, others, busy int64) (*Model, *Controller) {
	t.Helper()
	lay, err := Plan(1000, s, []LineSpec{{Name: "busy", Tier: TierCore, Weight: 1}, {Name: "idle", Tier: TierExplore, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, false)
	m.SharedUsed = others
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

// Reclaim starts when the shared pool is at least reclaimThresholdPercent
// used (90 %: 540 of 600), not below.
func TestReclaimStartsAtTheThreshold(t *testing.T) {
	for _, c := range []struct {
		others int64
		warn   bool
	}{{465, true}, {464, false}} { // + busy's 75: 540 (90 %), 539
		m, ctl := reclaimAt(t, reactive(), c.others, 225)
		if got := len(warned(ctl.Tick(m, 0))) == 1; got != c.warn {
			t.Errorf("shared pool %d of 600 used: warned %v, want %v", m.SharedUsed, got, c.warn)
		}
	}
	// A resource whose shared pool is 0 never reclaims (nothing to be full).
	s := reactive()
	s.SharedPercent, s.DedicatedPercent, s.BorrowLimitPercent = 0, 90, 0 // busy at 100 % of its 450
	lay, _ := Plan(1000, s, []LineSpec{{Name: "busy", Tier: TierCore, Weight: 1}, {Name: "idle", Tier: TierExplore, Weight: 1}})
	m := NewModel(lay, false)
	feed(t, m, "busy", 450, "fill")
	ctl := NewController(s, 0)
	if evs := ctl.Tick(m, 0); len(warned(evs)) != 0 {
		t.Fatalf("reclaimed without a shared pool: %v", evs)
	}
}

// The borrower is a line at 90 % or more of what it may use that has used
// its borrowing limit or found the shared pool empty.
func TestReclaimBorrowerHasUsedItsLimitOrFoundThePoolEmpty(t *testing.T) {
	for _, c := range []struct {
		name          string
		others, busy  int64
		releaseToBusy int64
		warn          bool
	}{
		{"borrowing limit used, 100 %", 525, 225, 0, true},
		{"pool empty, 74 of 75 borrowed", 526, 224, 0, true},
		{"pool one short of empty, 74 of 75 borrowed", 525, 224, 0, false},
		{"at 90 % of 250 exactly", 525, 225, 25, true},
		{"just under 90 %: 225 of 251", 525, 225, 26, false},
	} {
		m, ctl := reclaimAt(t, reactive(), c.others, 0)
		if c.releaseToBusy > 0 {
			_ = m.Release("busy", c.releaseToBusy)
		}
		feed(t, m, "busy", c.busy, "fill") // dedicated, then shared: none of the buffer
		evs := ctl.Tick(m, 0)
		if got := len(warned(evs)) == 1; got != c.warn {
			t.Errorf("%s: warned %v (%v), want %v; busy %+v, shared %d", c.name, got, evs, c.warn, m.Lines["busy"], m.SharedUsed)
		}
		if c.warn && len(ctl.Reclaims) == 1 && ctl.Reclaims[0].To != "busy" {
			t.Errorf("%s: reclaim towards %s", c.name, ctl.Reclaims[0].To)
		}
	}
}

// threeLines: limit 1000, shared 600, dedicated 100 each (borrowing limit
// 50), tiers off; busy has used its dedicated part and its borrowing limit
// and the shared pool is 95 % used.
func threeLines(t *testing.T, s Settings) (*Model, *Controller) {
	t.Helper()
	lay, err := Plan(1000, s, []LineSpec{{Name: "busy", Tier: TierCore, Weight: 1}, {Name: "idle", Tier: TierExplore, Weight: 1}, {Name: "third", Tier: TierExplore, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, false)
	m.SharedUsed = 520
	feed(t, m, "busy", 150, "fill")
	return m, NewController(s, 0)
}

// Each line using under 50 % of its dedicated part (not at 50 %) is warned
// of a reclaim of 20 % of its dedicated part, never more than it leaves
// unused; ids count up from r1 in the order the lines are visited (by
// name), and the reason gives the shared pool's use and the borrower's.
func TestReclaimLendersAmountsIdsAndReason(t *testing.T) {
	m, ctl := threeLines(t, reactive())
	// idle lent 75 of its 100 to third earlier and uses 10 of its 25 (40 %):
	// 15 unused, under 20 % of 100.
	if got := m.Reclaim("idle", "third", 75); got != 75 {
		t.Fatalf("setup: moved %d", got)
	}
	feed(t, m, "idle", 10, "use")
	evs := warned(ctl.Tick(m, 0))
	if len(evs) != 2 || len(ctl.Reclaims) != 2 {
		t.Fatalf("warned %v, want idle and third", evs)
	}
	r1, r2 := ctl.Reclaims[0], ctl.Reclaims[1]
	if r1.ID != "r1" || r1.From != "idle" || r1.Amount != 15 || r2.ID != "r2" || r2.From != "third" || r2.Amount != 20 || r1.To != "busy" || r2.To != "busy" {
		t.Fatalf("reclaims %+v %+v; want r1 idle 15 and r2 third 20, to busy", r1, r2)
	}
	if want := "shared pool 95% used; idle uses under 50% of its dedicated part; busy is at 100%"; r1.Reason != want || !strings.Contains(evs[0].Reason, want) {
		t.Fatalf("reason %q, want %q", r1.Reason, want)
	}
	if r1.WarnedMs != 0 || r1.State != ReclaimWarned || r1.DryRun {
		t.Fatalf("reclaim %+v", r1)
	}

	// At exactly 50 % of its part a line is not idle. (Confirmation by
	// hand here, so that the reclaims stay open.)
	manual := reactive()
	manual.ReclaimConfirmSeconds = 0
	m, ctl = threeLines(t, manual)
	feed(t, m, "idle", 50, "half")
	feed(t, m, "third", 49, "under")
	evs = warned(ctl.Tick(m, 0))
	if len(evs) != 1 || evs[0].Line != "third" || evs[0].Amount != 20 {
		t.Fatalf("warned %v, want only third (49 %%)", evs)
	}
	// A line already warned is not warned again while that reclaim is open;
	// once it is cancelled, the next warning has the next id.
	if evs = warned(ctl.Tick(m, SampleMs)); len(evs) != 0 {
		t.Fatalf("warned again while r1 is open: %v", evs)
	}
	if _, err := ctl.Cancel("r1", SampleMs); err != nil {
		t.Fatal(err)
	}
	evs = warned(ctl.Tick(m, 2*SampleMs))
	if len(evs) != 1 || evs[0].Line != "third" || len(ctl.Reclaims) != 2 || ctl.Reclaims[1].ID != "r2" {
		t.Fatalf("after the cancel: warned %v, reclaims %v; want third again as r2", evs, ctl.Reclaims)
	}
}

// The confirmation delay runs from the warning: a reclaim warned at 30 s
// is confirmed and executed at 60 s, not before.
func TestReclaimConfirmDelayRunsFromTheWarning(t *testing.T) {
	m, ctl := reclaimAt(t, reactive(), 520, 0)
	if evs := ctl.Tick(m, 0); len(warned(evs)) != 0 {
		t.Fatalf("warned with busy idle: %v", evs)
	}
	feed(t, m, "busy", 225, "fill")
	for _, now := range []int64{10_000, 20_000, 30_000, 40_000, 50_000} {
		evs := ctl.Tick(m, now)
		if now == 30_000 && len(warned(evs)) != 1 {
			t.Fatalf("not warned at the sample of 30 s: %v", evs)
		}
		if len(eventsOf(evs, "RECLAIM_CONFIRMED")) != 0 {
			t.Fatalf("confirmed at %d ms, %d ms after the warning", now, now-30_000)
		}
	}
	evs := ctl.Tick(m, 60_000)
	if len(eventsOf(evs, "RECLAIM_CONFIRMED")) != 1 || len(eventsOf(evs, "RECLAIM_EXECUTED")) != 1 || m.Lines["busy"].Reclaimed != 30 {
		t.Fatalf("at 60 s: %v", evs)
	}
	if r := ctl.Reclaims[0]; r.State != ReclaimExecuted || r.UpdateMs != 60_000 || r.WarnedMs != 30_000 {
		t.Fatalf("reclaim %+v", r)
	}
}

// Execution re-checks what the lender still leaves unused: all of it used
// meanwhile cancels the reclaim; part of it moves what is left.
func TestReclaimExecutionRechecksWhatIsIdle(t *testing.T) {
	m, ctl := reclaimAt(t, reactive(), 520, 225)
	ctl.Tick(m, 0)
	feed(t, m, "idle", 150, "busy-now")
	evs := ctl.Tick(m, 30_000)
	if c := eventsOf(evs, "RECLAIM_CANCELLED"); len(c) != 1 || ctl.Reclaims[0].State != ReclaimCancelled || m.Lines["idle"].Lent != 0 || len(eventsOf(evs, "RECLAIM_EXECUTED")) != 0 {
		t.Fatalf("lender now busy: %v, reclaim %+v", evs, ctl.Reclaims[0])
	}

	m, ctl = reclaimAt(t, reactive(), 520, 225)
	ctl.Tick(m, 0)
	feed(t, m, "idle", 130, "most")
	evs = ctl.Tick(m, 30_000)
	// 20 moved; and as the lender now uses more than half of what it owns,
	// the same tick's reclaim step gives them back.
	ex, back := eventsOf(evs, "RECLAIM_EXECUTED"), eventsOf(evs, "GIVE_BACK")
	if len(ex) != 1 || ex[0].Amount != 20 || ex[0].To != "busy" || len(back) != 1 || back[0].Amount != 20 || ctl.Reclaims[0].State != ReclaimReturned {
		t.Fatalf("20 left idle: %v, reclaim %+v", evs, ctl.Reclaims[0])
	}
}

// A lender whose use rose to 50 % of what it owns now gets back what the
// borrower does not hold of it: part now, the rest when the borrower
// frees it; the reclaim is RETURNED once all is back. Below 50 % nothing
// goes back.
func TestReclaimGivesBackAsTheBorrowerFreesIt(t *testing.T) {
	m, ctl := reclaimAt(t, reactive(), 520, 225)
	ctl.Tick(m, 0)
	ctl.Tick(m, 30_000) // executed: idle owns 120, busy 180 (holding 150 of it)
	feed(t, m, "idle", 59, "under")
	if evs := ctl.Tick(m, 60_000); len(eventsOf(evs, "GIVE_BACK")) != 0 {
		t.Fatalf("given back to a lender at 59 of 120: %v", evs)
	}
	feed(t, m, "idle", 1, "half")  // 60 of 120: 50 %
	feed(t, m, "busy", 20, "more") // busy holds 170 of its 180: 10 free
	m.SharedUsed -= 120            // the others finished: under the threshold, no new reclaim
	evs := ctl.Tick(m, 90_000)
	g := eventsOf(evs, "GIVE_BACK")
	if r := ctl.Reclaims[0]; len(g) != 1 || g[0].Amount != 10 || g[0].Line != "idle" || g[0].To != "busy" || r.Amount != 20 || r.State != ReclaimExecuted || r.UpdateMs != 90_000 {
		t.Fatalf("partial give-back: %v, reclaim %+v", evs, r)
	}
	m.Lines["busy"].UsedDedicated = 150 // busy finished some work
	feed(t, m, "idle", 10, "more")      // 70 of the 130 idle owns now: over 50 % still
	evs = ctl.Tick(m, 120_000)
	if g := eventsOf(evs, "GIVE_BACK"); len(g) != 1 || g[0].Amount != 20 || ctl.Reclaims[0].State != ReclaimReturned || m.Lines["idle"].Lent != 0 {
		t.Fatalf("the rest: %v, reclaim %+v", evs, ctl.Reclaims[0])
	}
	if evs := ctl.Tick(m, 150_000); len(eventsOf(evs, "GIVE_BACK")) != 0 {
		t.Fatalf("a returned reclaim gave back again: %v", evs)
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

// Two lines equally full: the borrower is the first by name (every
// instance picks the same). A line whose 20 % is under one unit has
// nothing to lend and is not warned (no reclaim of 0).
func TestReclaimTiesAndNothingToLend(t *testing.T) {
	lay, err := Plan(1000, reactive(), []LineSpec{{Name: "a", Tier: TierCore, Dedicated: 100}, {Name: "b", Tier: TierCore, Dedicated: 100},
		{Name: "idle", Tier: TierExplore, Dedicated: 96}, {Name: "tiny", Tier: TierExplore, Dedicated: 4}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, false)
	m.SharedUsed = 450
	feed(t, m, "a", 150, "full") // 100 + its borrowing limit 50: 100 %
	feed(t, m, "b", 150, "full")
	evs := warned(NewController(reactive(), 0).Tick(m, 0))
	if len(evs) != 1 || evs[0].Line != "idle" || evs[0].Amount != 19 || !strings.Contains(evs[0].Reason, "; a is at 100%") {
		t.Fatalf("warned %v; want idle alone, 19 towards a", evs)
	}
}
