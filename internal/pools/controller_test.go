package pools

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func kinds(evs []Event) map[string]int {
	k := map[string]int{}
	for _, e := range evs {
		k[e.Kind]++
	}
	return k
}

// feed applies n units to line at a steady pace and finishes them at once,
// so Consumed grows by n.
func feed(t *testing.T, m *Model, line string, n int64, tag string) {
	t.Helper()
	sid := fmt.Sprintf("%s-%s-%d", line, tag, m.Lines[line].Consumed)
	d, err := m.Apply(ApplyReq{SessionID: sid, Line: line, Amount: n, Critical: true, Continuation: true})
	if err != nil || d.Reason != "" {
		t.Fatalf("feed %s %d: %v %+v", line, n, err, d)
	}
	_, _ = m.Finish(sid, n)
}

func TestReactiveReleasesTheBufferWhenTheRateDoubles(t *testing.T) {
	lay, _ := Plan(1_000_000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierGrowth, Weight: 1}, {Name: "b", Tier: TierGrowth, Weight: 1}})
	s := DefaultSettings()
	s.Elasticity = ElasticityReactive
	m := NewModel(lay, true)
	c := NewController(s, 60_000)
	var evs []Event
	now := int64(0)
	step := func(amount int64) {
		for range 3 { // three ticks per sample
			evs = append(evs, c.Tick(m, now)...)
			now += TickMs
			m.NewPeriod(now / 60_000)
		}
		feed(t, m, "a", amount, fmt.Sprint(now))
	}
	for range 4 {
		step(20_000) // 667/s: a period's worth 40k of a may-use 225k
	}
	if kinds(evs)["LEND_REACTIVE"] != 0 {
		t.Fatalf("lent before any burst: %v", evs)
	}
	step(80_000) // 4× within 30 s
	step(80_000)
	var lend *Event
	for i := range evs {
		if evs[i].Kind == "LEND_REACTIVE" {
			lend = &evs[i]
		}
	}
	if lend == nil || lend.Line != "a" || lend.Amount != 100_000 || m.Lines["a"].Buffer != 100_000 {
		t.Fatalf("no reactive release of the whole buffer to a: %v", evs)
	}
	// After the hold and with the rate back down, the buffer goes back 10 % per tick.
	for range 14 {
		step(20_000)
	}
	if m.Lines["a"].Buffer != 0 || kinds(evs)["RETURN"] != 10 {
		t.Fatalf("buffer not returned in 10 steps: line %+v events %v", m.Lines["a"], kinds(evs))
	}
}

func TestWatermarkRisesOnThreeRisingSamplesAndDecaysBack(t *testing.T) {
	s := DefaultSettings()
	s.Elasticity = ElasticityPredictive
	s.SharedPercent, s.BufferPercent = 70, 0 // no buffer: nothing lent, may-use stays 450
	lay, _ := Plan(1000, s, []LineSpec{{Name: "a", Tier: TierGrowth, Weight: 1}})
	m := NewModel(lay, true)
	c := NewController(s, 0) // long periods: use accumulates
	now := int64(0)
	c.Tick(m, now)
	// may use 300 + 150 = 450; watermark 80 % = 360. Rising rates, use near 360.
	for i, n := range []int64{300, 10, 12, 14, 16} {
		now += SampleMs
		feed(t, m, "a", n, fmt.Sprint(i))
		for _, e := range c.Tick(m, now) {
			if e.Kind == "WATERMARK_RAISED" && (i != 4 || e.Amount != 8500) {
				t.Fatalf("raised at sample %d to %d", i, e.Amount)
			}
		}
	}
	if m.Lines["a"].Watermark != 8500 {
		t.Fatalf("watermark %d, want 8500", m.Lines["a"].Watermark)
	}
	// No more rise: the 500 bp gap halves every 60 s.
	now += SampleMs
	c.Tick(m, now)
	now += SampleMs
	c.Tick(m, now)
	if w := m.Lines["a"].Watermark; w != 8250 {
		t.Fatalf("after 60 s without rise: %d, want 8250", w)
	}
	for range 20 {
		now += SampleMs
		c.Tick(m, now)
	}
	if w := m.Lines["a"].Watermark; w != 8000 {
		t.Fatalf("finally %d, want back at 8000", w)
	}
}

func TestElasticityOffMakesNoMove(t *testing.T) {
	lay, _ := Plan(1_000_000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierGrowth, Weight: 1}})
	s := DefaultSettings()
	s.Elasticity = ElasticityOff
	m := NewModel(lay, true)
	c := NewController(s, 60_000)
	for i := range 40 {
		feed(t, m, "a", int64(1000*(i%7+1)*(i%7+1)), fmt.Sprint(i))
		if evs := c.Tick(m, int64(i)*TickMs); len(evs) > 0 {
			t.Fatalf("OFF made moves: %v", evs)
		}
		m.NewPeriod(int64(i) * TickMs / 60_000)
	}
}

func reclaimWorld(t *testing.T, s Settings) (*Model, *Controller) {
	t.Helper()
	lay, _ := Plan(1000, s, []LineSpec{{Name: "busy", Tier: TierCore, Weight: 1}, {Name: "idle", Tier: TierExplore, Weight: 1}})
	// shared 600, dedicated 150 + 150, borrow cap 75 each (default 50 %).
	m := NewModel(lay, false)
	m.SharedUsed = 520 // others' use of the shared pool; busy's 75 brings it to 99 %
	// The buffer is lent out (an operator's release): the short shared
	// pool gets none of it, so the pressure stays for the reclaim.
	if err := m.Release("idle", lay.Buffer); err != nil {
		t.Fatal(err)
	}
	feed(t, m, "busy", 225, "fill")
	return m, NewController(s, 0)
}

func TestReclaimWarnsConfirmsAndExecutes(t *testing.T) {
	s := DefaultSettings()
	s.ReclaimConfirmSeconds = 30
	m, c := reclaimWorld(t, s)
	if evs := c.Tick(m, 0); len(warned(evs)) != 0 {
		t.Fatalf("warned before the lender's first rate: %v", evs)
	}
	evs := c.Tick(m, 30_000)
	if k := kinds(evs); k["RECLAIM_WARNED"] != 1 || len(c.Reclaims) != 1 || c.Reclaims[0].Amount != 30 || c.Reclaims[0].From != "idle" {
		t.Fatalf("no warning: %v %v", evs, c.Reclaims)
	}
	c.Tick(m, 40_000)
	if m.Lines["busy"].Reclaimed != 0 {
		t.Fatal("executed before the confirmation delay")
	}
	evs = c.Tick(m, 60_000)
	if k := kinds(evs); k["RECLAIM_CONFIRMED"] != 1 || k["RECLAIM_EXECUTED"] != 1 || m.Lines["busy"].Reclaimed != 30 || m.Lines["idle"].Lent != 30 {
		t.Fatalf("not executed: %v busy %+v", evs, m.Lines["busy"])
	}
	// The lender's use rises past 75 % of what it owns now (120): it gets
	// its quota back first.
	feed(t, m, "idle", 90, "rise")
	m.Lines["busy"].UsedDedicated = 150 // busy finished some work: 30 of its 180 is unused
	c.Tick(m, 90_000)
	if m.Lines["idle"].Lent != 0 || c.Reclaims[0].State != ReclaimReturned {
		t.Fatalf("not given back: idle %+v reclaim %+v", m.Lines["idle"], c.Reclaims[0])
	}
}

func TestReclaimDryRunAndManualConfirmAndCancel(t *testing.T) {
	s := DefaultSettings()
	s.ReclaimDryRun = true
	m, c := reclaimWorld(t, s)
	c.Tick(m, 0)
	c.Tick(m, 30_000)
	c.Tick(m, 60_000)
	if r := c.Reclaims[0]; r.State != ReclaimExecuted || !r.DryRun || m.Lines["idle"].Lent != 0 {
		t.Fatalf("dry run moved or did not record: %+v idle %+v", r, m.Lines["idle"])
	}

	s = DefaultSettings()
	s.ReclaimConfirmSeconds = 0
	m, c = reclaimWorld(t, s)
	c.Tick(m, 0)
	c.Tick(m, 30_000)
	c.Tick(m, 3_600_000)
	if c.Reclaims[0].State != ReclaimWarned {
		t.Fatalf("manual reclaim confirmed by itself: %+v", c.Reclaims[0])
	}
	if _, err := c.Confirm(m, "nope", 1); !errors.Is(err, ErrUnknownReclaim) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := c.Confirm(m, c.Reclaims[0].ID, 1); err != nil || m.Lines["busy"].Reclaimed != 30 {
		t.Fatalf("manual confirm: %v %+v", err, m.Lines["busy"])
	}
	if _, err := c.Cancel(c.Reclaims[0].ID, 2); !errors.Is(err, ErrReclaimState) {
		t.Fatalf("cancel of an executed reclaim: %v", err)
	}
}

// TestModelInvariantsUnderRandomOperations drives random applies, finishes,
// sweeps, releases, returns, reclaims, grants and periods through the model
// and checks after each step: no period holds more than limit + grants
// (overage aside), no line holds more than it may use plus grants, every
// pool's counters equal the sum of its open and finished sessions.
func TestModelInvariantsUnderRandomOperations(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		lay, _ := Plan(int64(100+rng.IntN(10000)), DefaultSettings(), LineNames(2+rng.IntN(6)))
		m := NewModel(lay, rng.IntN(2) == 0)
		var names []string
		for _, l := range lay.Lines {
			names = append(names, l.Name)
		}
		var open []string
		now := int64(0)
		for step := range 400 {
			now += int64(rng.IntN(50))
			switch op := rng.IntN(10); {
			case op < 5:
				sid := fmt.Sprintf("s%d", step)
				d, err := m.Apply(ApplyReq{SessionID: sid, Line: names[rng.IntN(len(names))], Amount: 1 + rng.Int64N(lay.Limit/4+1),
					Min: int64(rng.IntN(2)), Critical: rng.IntN(2) == 0, Continuation: rng.IntN(3) == 0, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				if d.Reason == "" {
					open = append(open, sid)
				}
			case op < 7 && len(open) > 0:
				i := rng.IntN(len(open))
				s := m.Sessions[open[i]]
				if _, err := m.Finish(open[i], int64(rng.IntN(int(s.Granted)+1))); err != nil {
					t.Fatal(err)
				}
				open = append(open[:i], open[i+1:]...)
			case op == 7 && len(open) > 0:
				_ = m.Sweep(open[rng.IntN(len(open))])
			case op == 8:
				_ = m.Release([]string{"", names[0]}[rng.IntN(2)], int64(1+rng.IntN(int(lay.Buffer)+1)))
				m.Return(names[rng.IntN(len(names))], int64(rng.IntN(100)))
				m.Reclaim(names[rng.IntN(len(names))], names[rng.IntN(len(names))], int64(rng.IntN(100)))
			default:
				_ = m.AddGrant(Grant{ID: fmt.Sprintf("g%d", step), Amount: int64(1 + rng.IntN(100)), EffectiveMs: now, ExpiresMs: now + int64(1+rng.IntN(500))})
			}
			checkInvariants(t, m, seed, step)
		}
	}
}

func checkInvariants(t *testing.T, m *Model, seed uint64, step int) {
	t.Helper()
	var total, grants, sharedSum int64
	for _, g := range m.Grants {
		grants += g.Amount
		if g.Used < 0 || g.Used > g.Amount {
			t.Fatalf("seed %d step %d: grant %+v", seed, step, g)
		}
	}
	for _, l := range m.Lines {
		total += l.Used() + l.UsedGrant
		sharedSum += l.UsedShared
		if l.UsedShared > m.SharedCap() || l.UsedBuffer > l.Buffer || l.UsedDedicated > l.OwnDedicated() {
			t.Fatalf("seed %d step %d: line %s beyond its parts: %+v", seed, step, l.Name, l)
		}
		if l.Used()+l.UsedGrant != l.Reserved+l.Charged {
			t.Fatalf("seed %d step %d: line %s pools %d ≠ reserved+charged %d", seed, step, l.Name, l.Used()+l.UsedGrant, l.Reserved+l.Charged)
		}
	}
	if sharedSum != m.SharedUsed || m.SharedUsed > m.SharedCap() || m.BufferFree() < 0 {
		t.Fatalf("seed %d step %d: shared %d (sum %d, cap %d), buffer free %d", seed, step, m.SharedUsed, sharedSum, m.SharedCap(), m.BufferFree())
	}
	if total > m.Layout.Limit+grants {
		t.Fatalf("seed %d step %d: %d held > limit %d + grants %d", seed, step, total, m.Layout.Limit, grants)
	}
}
