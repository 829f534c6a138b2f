package pools

import "testing"

// pressedExplore: busy (EXPLORE, watermark 60 %) holds its 150 dedicated
// and 200 of the shared pool, so it reaches 150 + 200 + half of the 400
// free = 550 and uses 64 % of it; idle (CORE) uses nothing. The shared pool
// is a third used. Tiers off (nothing refuses), reactive elasticity (no
// lending ahead of a forecast).
func pressedExplore(t *testing.T, confirm int64) (*Model, *Controller) {
	t.Helper()
	s := reactive()
	s.ReclaimConfirmSeconds = confirm
	m, c := reclaimAt(t, s, 0, 0)
	b := m.Lines["busy"]
	b.Tier, b.Watermark = TierExplore, TierExplore.BaseWatermark()
	feed(t, m, "busy", 350, "fill")
	return m, c
}

// Reclaim starts when a line is under pressure (at its watermark of what it
// can reach), not when the shared pool is used to the last token (before,
// it needed the shared pool 90 % used: a line at 97.5 % with refusals got
// nothing); and only from a line whose use and forecast use are both under
// half of its dedicated part — never one the controller has no rate of yet.
func TestReclaimStartsUnderPressureFromIdleLines(t *testing.T) {
	m, c := pressedExplore(t, 30)
	if evs := c.Tick(m, 0); len(warned(evs)) != 0 {
		t.Fatalf("warned without a rate of the lender: %v", evs)
	}
	evs := c.Tick(m, 30_000)
	if w := warned(evs); len(w) != 1 || w[0].Line != "idle" || w[0].Amount != 30 || m.SharedUsed*100/m.SharedCap() > 34 {
		t.Fatalf("busy at 64 %% of its reach, the shared pool a third used: %v", evs)
	}

	// Below its watermark: nothing.
	m, c = reclaimAt(t, reactive(), 0, 0)
	b := m.Lines["busy"]
	b.Tier, b.Watermark = TierExplore, TierExplore.BaseWatermark()
	feed(t, m, "busy", 300, "fill") // 300 of 150 + 150 + 225 = 57 %
	c.Tick(m, 0)
	if evs := c.Tick(m, 30_000); len(warned(evs)) != 0 {
		t.Fatalf("warned with busy under its watermark: %v", evs)
	}

	// A lender forecast to use half of its dedicated part in a period is
	// not idle, whatever it holds now.
	m, c = pressedExplore(t, 30)
	c.Tick(m, 0)
	m.Lines["idle"].Consumed += 8 // 0.27/s: 80 in the 5-minute horizon, past 75
	if evs := c.Tick(m, 30_000); len(warned(evs)) != 0 {
		t.Fatalf("warned a lender forecast to use 80 of 150: %v", evs)
	}
}

// Reclaims take at most 20 % of a line's dedicated part per hour, however
// many rounds (before, seven rounds took 75 % of an idle line's dedicated
// part in four minutes); the next 20 % only an hour after the first.
func TestReclaimTakesAtMostAFifthPerHour(t *testing.T) {
	m, c := pressedExplore(t, 30)
	for now := int64(0); now <= 3_590_000; now += TickMs {
		c.Tick(m, now)
		if l := m.Lines["idle"].Lent; l > 30 {
			t.Fatalf("at %d s: %d of idle's 150 taken within the hour", now/1000, l)
		}
	}
	if m.Lines["idle"].Lent != 30 {
		t.Fatalf("taken %d in the first hour, want 30", m.Lines["idle"].Lent)
	}
	for now := int64(3_600_000); now <= 3_700_000; now += TickMs {
		c.Tick(m, now)
	}
	if m.Lines["idle"].Lent != 60 {
		t.Fatalf("taken %d after an hour, want 60", m.Lines["idle"].Lent)
	}
}

// Hysteresis: a lender gets its quota back only when it uses 75 % of what
// it owns now (not at 50 %), and after a give-back no reclaim takes from it
// for an hour, so quota does not move back and forth every 30 s.
func TestReclaimHysteresis(t *testing.T) {
	m, c := pressedExplore(t, 30)
	for now := int64(0); now <= 60_000; now += TickMs {
		c.Tick(m, now)
	}
	if m.Lines["idle"].Lent != 30 {
		t.Fatalf("not executed: idle %+v", m.Lines["idle"])
	}
	feed(t, m, "idle", 70, "some") // 70 of the 120 it owns now: 58 %
	m.Lines["idle"].Consumed -= 70 // held, not a rate: no forecast of more
	now := int64(70_000)
	for ; now <= 150_000; now += TickMs {
		if evs := c.Tick(m, now); len(eventsOf(evs, "GIVE_BACK")) != 0 {
			t.Fatalf("given back at 58 %%: %v", evs)
		}
	}
	feed(t, m, "idle", 20, "more") // 90 of 120: 75 %
	m.Lines["busy"].UsedDedicated = 150
	for ; now <= 180_000; now += TickMs {
		c.Tick(m, now)
	}
	if m.Lines["idle"].Lent != 0 {
		t.Fatalf("not given back at 75 %%: idle %+v", m.Lines["idle"])
	}
	// idle is idle again (a new period), busy still pressed: not reclaimed
	// from within the hour after the give-back.
	m.NewPeriod(1)
	feed(t, m, "busy", 350, "again")
	for ; now <= 1_800_000; now += TickMs {
		if evs := c.Tick(m, now); len(warned(evs)) != 0 {
			t.Fatalf("reclaimed at %d s, %d s after a give-back: %v", now/1000, (now-180_000)/1000, evs)
		}
	}
}

// When the shared pool is 90 % used, the free buffer is lent to the CORE
// lines in equal parts (a CORE critical apply takes the shared pool and
// then its line's buffer); it goes back, 10 % a tick, once the shared pool
// is no longer that full.
func TestCoreGetsTheBufferWhenTheSharedPoolRunsShort(t *testing.T) {
	lay, err := Plan(1000, reactive(), []LineSpec{{Name: "c1", Tier: TierCore, Weight: 1}, {Name: "c2", Tier: TierCore, Weight: 1},
		{Name: "g", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m, c := NewModel(lay, true), NewController(reactive(), 0)
	m.SharedUsed = 539 // one short of 90 %
	if evs := c.Tick(m, 0); len(eventsOf(evs, "LEND_PREDICTIVE")) != 0 {
		t.Fatalf("lent below 90 %%: %v", evs)
	}
	m.SharedUsed = 540
	evs := c.Tick(m, 10_000)
	if l := eventsOf(evs, "LEND_PREDICTIVE"); len(l) != 2 || m.Lines["c1"].Buffer != 50 || m.Lines["c2"].Buffer != 50 || m.Lines["g"].Buffer != 0 {
		t.Fatalf("at 90 %%: %v", evs)
	}
	c.Tick(m, 20_000)
	if m.Lines["c1"].Buffer != 50 {
		t.Fatalf("returned while the shared pool is short: %+v", m.Lines["c1"])
	}
	m.SharedUsed = 300
	for now := int64(30_000); now <= 200_000; now += TickMs {
		c.Tick(m, now)
	}
	if m.Lines["c1"].Buffer != 0 || m.Lines["c2"].Buffer != 0 || m.BufferFree() != 100 {
		t.Fatalf("not returned: %+v %+v", m.Lines["c1"], m.Lines["c2"])
	}
}

// Buffer lent to a line below CORE that it does not hold comes back when
// the shared pool runs short, and goes to the CORE lines: CORE's critical
// work before a burst's.
func TestCoreGuardTakesBackUnusedBufferFromOtherLines(t *testing.T) {
	lay, err := Plan(1000, reactive(), []LineSpec{{Name: "c", Tier: TierCore, Weight: 1}, {Name: "g", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m, c := NewModel(lay, true), NewController(reactive(), 0)
	c.Tick(m, 0)
	for now, n := int64(30_000), int64(10); now <= 90_000; now, n = now+SampleMs, n*4 {
		m.Lines["g"].Consumed += n // 10, 40, 160: a doubling each sample, pressing on g's quota
		c.Tick(m, now)
	}
	g := m.Lines["g"]
	if g.Buffer != 100 {
		t.Fatalf("no reactive release to g: %+v", g)
	}
	feed(t, m, "g", g.OwnDedicated()+30, "burst") // g holds 30 of the shared pool, none of its buffer
	m.SharedUsed = 540
	evs := c.Tick(m, 100_000)
	if g.Buffer != 0 || m.Lines["c"].Buffer != 100 || len(eventsOf(evs, "RETURN")) != 1 {
		t.Fatalf("shared pool short: g %+v, c %+v, events %v", g, m.Lines["c"], evs)
	}
}
