package pools

import (
	"strings"
	"testing"
)

// returns lists the amounts of the RETURN events of line.
func returns(evs []Event, line string) []int64 {
	var out []int64
	for _, e := range eventsOf(evs, "RETURN") {
		if e.Line == line {
			out = append(out, e.Amount)
		}
	}
	return out
}

func tickN(m *Model, c *Controller, from int64, n int) ([]Event, int64) {
	var evs []Event
	now := from
	for range n {
		now += TickMs
		evs = append(evs, c.Tick(m, now)...)
	}
	return evs, now
}

func same(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A controller that takes over a resource (docs/pools.md §6) adopts the
// buffer a line holds beyond the operators' active releases — lent by the
// last holder, or left by a release that expired — and gives it back 10 %
// of it every tick; an operator's release is never taken back.
func TestControllerAdoptsBufferNoReleaseHolds(t *testing.T) {
	for _, c := range []struct {
		name     string
		released int64 // the operators' active release to a
		want     []int64
	}{
		{"nothing released", 0, []int64{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}},
		{"4000 released", 4000, []int64{600, 600, 600, 600, 600, 600, 600, 600, 600, 600}},
	} {
		m, _ := oneLine(t, ElasticityReactive)
		_ = m.Release("a", 10_000) // what the last holder left
		ctl := NewController(func() Settings { s := DefaultSettings(); s.Elasticity = ElasticityReactive; return s }(), 0)
		ctl.Released = map[string]int64{"a": c.released}
		evs, _ := tickN(m, ctl, 0, 15)
		if got := returns(evs, "a"); !same(got, c.want) || m.Lines["a"].Buffer != c.released {
			t.Errorf("%s: returned %v, buffer left %d; want %v and %d", c.name, got, m.Lines["a"].Buffer, c.want, c.released)
		}
	}
	// Without Released (the caller does not say what operators lent) the
	// controller gives back only what it lent itself: nothing here.
	m, _ := oneLine(t, ElasticityReactive)
	_ = m.Release("a", 10_000)
	ctl := NewController(func() Settings { s := DefaultSettings(); s.Elasticity = ElasticityReactive; return s }(), 0)
	if evs, _ := tickN(m, ctl, 0, 15); len(returns(evs, "a")) != 0 || m.Lines["a"].Buffer != 10_000 {
		t.Fatalf("returned %v without knowing the releases", returns(evs, "a"))
	}
}

// Buffer the controller counts as lent but the line no longer holds (an
// operator or another instance took it back) is forgotten: the controller
// then gives back only what is left of its own lending, never an
// operator's release made since.
func TestControllerForgetsBufferTheLineNoLongerHolds(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	s.c.Released = map[string]int64{}
	a := s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs) // the burst: the whole free buffer, 20 000, held 5 minutes
	if a.Buffer != 20_000 {
		t.Fatalf("not lent: %+v", a)
	}
	s.m.Return("a", 15_000)      // taken back by hand
	_ = s.m.Release("a", 15_000) // and released again by an operator
	s.c.Released["a"] = 15_000   // which the caller reports
	for s.now < 800_000 {        // the hold ends at 390 s; then 10 % of 20 000 a tick
		s.sample(1125/3, TickMs) // the rate back to normal
	}
	if got := returns(s.evs, "a"); !same(got, []int64{2000, 2000, 1000}) || a.Buffer != 15_000 {
		t.Fatalf("returned %v, buffer %d; want 5000 back in 10 %% steps and the operator's 15 000 kept", got, a.Buffer)
	}

	// Everything it lent taken back: the episode is over, so buffer adopted
	// later goes back 10 % of the new amount a tick, not of the old peak.
	s = newSampler(t, ElasticityReactive)
	s.c.Released = map[string]int64{}
	a = s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs)
	s.m.Return("a", 20_000)
	s.sample(2250, SampleMs) // forgets the 20 000
	_ = s.m.Release("a", 1000)
	s.evs = nil
	for s.now < 1_200_000 {
		s.sample(750/3, TickMs)
	}
	if got := returns(s.evs, "a"); len(got) != 10 || got[0] != 100 || a.Buffer != 0 {
		t.Fatalf("returned %v of 1000 adopted after an episode was taken back, buffer %d; want 10 × 100", got, a.Buffer)
	}
}

// Buffer in the shared pool that no active release holds (a release that
// expired while sessions held part of it, or what an apply put there:
// Model.SpareToShared) stays while the shared pool is short — it is where
// the short pool's rule (guardShared) would put it; given back, it would
// only be released there again — and then goes back as that rule's does,
// 10 % of it a tick; an active release stays. Once the pool is not short,
// such buffer goes back as soon as the pool does not hold it, all at once.
func TestControllerReturnsSharedBufferNoReleaseHolds(t *testing.T) {
	m, _ := oneLine(t, ElasticityReactive)
	// The whole buffer (20,000) is in the shared pool, 17,000 of it by an
	// active release (so the controller has no free buffer of its own to
	// put there when the pool is short).
	_ = m.Release("", 20_000)
	ctl := NewController(func() Settings { s := DefaultSettings(); s.Elasticity = ElasticityReactive; return s }(), 0)
	ctl.Released = map[string]int64{"": 17_000}
	// The shared pool is full: nothing can go back, and no event says 0.
	m.SharedUsed = m.SharedCap()
	if evs := ctl.Tick(m, 0); len(returns(evs, "")) != 0 || m.SharedBuffer != 20_000 {
		t.Fatalf("returned from a full shared pool: %v", evs)
	}
	m.SharedUsed = m.SharedCap() - 1000 // 1000 of it unused, the pool still short
	if evs := ctl.Tick(m, TickMs); len(returns(evs, "")) != 0 || m.SharedBuffer != 20_000 {
		t.Fatalf("returned %v from a short shared pool, shared buffer %d", returns(evs, ""), m.SharedBuffer)
	}
	m.SharedUsed = 0
	var back []int64
	for k := int64(2); k < 20; k++ {
		back = append(back, returns(ctl.Tick(m, k*TickMs), "")...)
	}
	if len(back) != 10 || back[0] != 300 || m.SharedBuffer != 17_000 {
		t.Fatalf("returned %v, shared buffer %d; want 10 × 300 back and the active release's 17,000 kept", back, m.SharedBuffer)
	}

	// Not short: unowned buffer goes back at once, as far as it is not held.
	m2, _ := oneLine(t, ElasticityReactive)
	_ = m2.Release("", 20_000)
	ctl2 := NewController(ctl.Settings, 0)
	ctl2.Released = map[string]int64{"": 17_000}
	m2.SharedUsed = m2.Layout.Shared / 2
	if evs := ctl2.Tick(m2, 0); !same(returns(evs, ""), []int64{3000}) || m2.SharedBuffer != 17_000 {
		t.Fatalf("returned %v, shared buffer %d; want the 3000 back at once", returns(evs, ""), m2.SharedBuffer)
	}
}

// Under AUTO a line may hold buffer lent both ahead of a forecast peak and
// against a burst. What was taken back is forgotten from the reactive part
// first, then the predictive part; the episode (and so the 10 % step, of
// its largest lending) goes on while any of it is still lent.
func TestControllerForgetsReactiveThenPredictiveLending(t *testing.T) {
	for _, c := range []struct {
		takenBack int64
		want      []int64
	}{
		{14_000, []int64{2000, 2000, 2000}}, // 3000 of each left
		{18_000, []int64{2000}},             // 2000 predictive left
	} {
		s := newSampler(t, ElasticityAuto)
		s.c.Released = map[string]int64{}
		a := s.m.Lines["a"]
		s.sample(7500, SampleMs)   // 250/s: 75 000 in 5 minutes, above 80 % of 90 000: 3000 lent ahead
		s.sample(7500, SampleMs)   // the same
		s.sample(15_000, SampleMs) // doubled: the other 17 000 for 5 minutes
		if lc := s.c.lines["a"]; lc.predLent != 3000 || lc.reactLent != 17_000 || a.Buffer != 20_000 {
			t.Fatalf("lent %d ahead and %d against the burst, buffer %d; want 3000, 17 000, 20 000", lc.predLent, lc.reactLent, a.Buffer)
		}
		s.m.Return("a", c.takenBack)
		for s.now < 1_200_000 {
			s.sample(100, TickMs) // 10/s: the peak is over
		}
		if got := returns(s.evs, "a"); !same(got, c.want) || a.Buffer != 0 {
			t.Errorf("%d taken back: returned %v, buffer %d; want %v", c.takenBack, got, a.Buffer, c.want)
		}
	}
}

// A reactive hold lasts 5 minutes: at the very sample it ends, a new
// doubling of the rate starts a new hold (no buffer goes back, the
// watermark is not lowered) instead of ending the old one.
func TestReactiveBurstAtTheHoldsEndRenewsIt(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs) // 90 s: the whole buffer, held to 390 s
	for s.now < 360_000 {
		s.sample(1125, SampleMs)
	}
	evs := s.sample(3000, SampleMs) // 390 s: 100/s, more than twice 37.5/s
	if len(returns(evs, "a")) != 0 || len(eventsOf(evs, "WATERMARK_LOWERED")) != 0 || s.m.Lines["a"].Buffer != 20_000 {
		t.Fatalf("at the hold's end a new burst: %v, buffer %d; want the hold renewed", evs, s.m.Lines["a"].Buffer)
	}
	for s.now < 660_000 {
		if evs := s.sample(1125, SampleMs); len(returns(evs, "a")) != 0 {
			t.Fatalf("returned at %d ms, inside the renewed hold: %v", s.now, evs)
		}
	}
	if evs := s.sample(1125, SampleMs); len(returns(evs, "a")) != 1 { // 690 s
		t.Fatalf("at the renewed hold's end: %v", evs)
	}
}

// The half-life decay works both ways and snaps back only under 10 basis
// points (0.1 point): a watermark 14 bp above its tier's comes to 10 bp
// (not snapped), then to the tier's; one lowered to 70 % comes back
// gradually; each step's reason names the tier's value.
func TestWatermarkDecayEdges(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	a := s.m.Lines["a"]
	s.sample(1125, SampleMs)
	a.Watermark = 8014
	s.sample(1125, SampleMs) // steady: no rise
	if a.Watermark != 8010 {
		t.Fatalf("14 bp above decayed to %d, want 8010 (10 bp is not under 10)", a.Watermark)
	}
	s.sample(1125, SampleMs)
	if a.Watermark != 8000 {
		t.Fatalf("10 bp above decayed to %d, want the tier's 8000", a.Watermark)
	}
	a.Watermark = 7000
	evs := s.sample(1125, SampleMs)
	if a.Watermark != 7293 {
		t.Fatalf("70 %% decayed to %d, want 7293 (the 1000 bp gap × 2^−½)", a.Watermark)
	}
	if d := eventsOf(evs, "WATERMARK_DECAYED"); len(d) != 1 || !strings.Contains(d[0].Reason, "back towards the tier's 80.00%") || d[0].Amount != 7293 {
		t.Fatalf("decay events %v", d)
	}
}

// Once the hold is over and the rate is back under twice its pre-burst
// rate, the burst is over: a later rise to twice that rate (but not twice
// the rate before it, so not a new burst) lowers nothing. While the
// lowering applies, the watermark is only lowered, not decayed first.
func TestReactiveLoweringEndsWithTheBurstAndIsNotDecayed(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	a := s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs) // 90 s: burst from 37.5/s, held to 390 s
	for s.now < 360_000 {
		s.sample(2250, SampleMs)
	}
	s.sample(2220, SampleMs) // 390 s: 74/s, under twice 37.5/s: the burst is over
	evs := s.sample(3000, SampleMs)
	if len(eventsOf(evs, "WATERMARK_LOWERED")) != 0 || len(eventsOf(evs, "LEND_REACTIVE")) != 0 || a.Watermark != 8000 {
		t.Fatalf("after the burst ended, 100/s: %v, watermark %d", evs, a.Watermark)
	}

	s = newSampler(t, ElasticityReactive)
	a = s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs)
	for s.now < 360_000 {
		s.sample(2250, SampleMs)
	}
	a.Watermark = 9000       // moved meanwhile (raised)
	s.sample(2250, SampleMs) // 390 s: still twice: lowered 5 points, no decay
	if a.Watermark != 8500 {
		t.Fatalf("at the hold's end: watermark %d, want 9000 − 500", a.Watermark)
	}
}

// predictive is a one-line world (may use 90 000, buffer 20 000) with a
// predictive controller of 60 s periods, for calling predict directly.
func predictive(t *testing.T) (*Model, *Controller, *LineState, *lineCtl, *[]Event) {
	m, _ := oneLine(t, ElasticityPredictive)
	s := DefaultSettings()
	s.Elasticity = ElasticityPredictive
	c := NewController(s, 60_000)
	evs := &[]Event{}
	return m, c, m.Lines["a"], c.line("a"), evs
}

// As the forecast rises, predictive elasticity lends what the forecast use
// is over 80 % by, less what it lent already: 12 000 at 1400/s (84 000 a
// period), then 6000 more at 1500/s (90 000). With no free buffer it lends
// nothing and says nothing. The episode's step back is 10 % of all that is
// lent, whichever elasticity lent it.
func TestPredictiveLendsTheGapLessWhatIsLent(t *testing.T) {
	m, c, l, lc, evs := predictive(t)
	emit := emitter(evs, 0)
	lc.level = 1400
	c.predict(m, l, lc, "a", emit)
	lc.level = 1500
	c.predict(m, l, lc, "a", emit)
	lend := eventsOf(*evs, "LEND_PREDICTIVE")
	if len(lend) != 2 || lend[0].Amount != 12_000 || lend[1].Amount != 6000 || l.Buffer != 18_000 {
		t.Fatalf("lent %v, buffer %d; want 12 000 then 6000", lend, l.Buffer)
	}

	m, c, l, lc, evs = predictive(t)
	_ = m.Release("", m.BufferFree())
	lc.level = 1500
	c.predict(m, l, lc, "a", emitter(evs, 0))
	if len(*evs) != 0 || l.Buffer != 0 {
		t.Fatalf("with no free buffer: %v", *evs)
	}

	// 5000 lent against a burst, then 12 000 ahead of a forecast: the
	// returns are 1700 (10 % of 17 000) a tick.
	m, c, l, lc, evs = predictive(t)
	_ = m.Release("a", 5000)
	lc.reactLent, lc.peakLent = 5000, 5000
	lc.level = 1400 // lent buffer is not part of what the forecast is held against
	c.predict(m, l, lc, "a", emitter(evs, 0))
	lc.level = 0
	c.returnBuffer(m, "a", 0, emitter(evs, 0))
	if ret := returns(*evs, "a"); len(ret) != 1 || ret[0] != 1700 {
		t.Fatalf("lent %v; returned %v, want 1700", eventsOf(*evs, "LEND_PREDICTIVE"), ret)
	}
}

// For periods of 5 minutes or less (the horizon itself included) the
// forecast use of a period is held against all the line may use without
// buffer, what it used already not subtracted (a new period starts soon):
// 75 000 forecast against 80 % of 90 000 lends 3000, with 60 000 used.
func TestPredictiveShortPeriodsIgnoreWhatIsUsed(t *testing.T) {
	for _, periodMs := range []int64{HorizonMs, 60_000} {
		m, _ := oneLine(t, ElasticityPredictive)
		s := DefaultSettings()
		s.Elasticity = ElasticityPredictive
		c := NewController(s, periodMs)
		l, lc := m.Lines["a"], c.line("a")
		l.UsedDedicated = 60_000
		lc.level = 75_000 / (float64(periodMs) / 1000) // 75 000 a period
		var evs []Event
		c.predict(m, l, lc, "a", emitter(&evs, 0))
		if lend := eventsOf(evs, "LEND_PREDICTIVE"); len(lend) != 1 || lend[0].Amount != 3000 {
			t.Errorf("period %d ms: lent %v, want 3000", periodMs, lend)
		}
	}
}

// Past the peak means, for buffer lent ahead of a forecast, that the
// average forecast over the next 5 minutes (level + trend·5.5) is back
// under 80 % of what the line may use: with a trend of 10/s a sample, a
// level of 1140/s (1195/s, 71 700 a period) returns, 1150/s (72 300) holds.
// Buffer lent only against a burst goes back whatever the forecast.
func TestReturnsWaitForTheForecastOnlyForPredictiveLending(t *testing.T) {
	for _, c := range []struct {
		level float64
		back  bool
	}{{1140, true}, {1145, true}, {1150, false}} { // 1145: exactly 80 %, not above
		m, ctl, l, lc, evs := predictive(t)
		_ = m.Release("a", 10_000)
		lc.predLent, lc.peakLent = 10_000, 10_000
		lc.level, lc.trend = c.level, 10
		ctl.returnBuffer(m, "a", 0, emitter(evs, 0))
		if got := len(returns(*evs, "a")) == 1; got != c.back || (got && l.Buffer != 9000) {
			t.Errorf("level %.0f, trend 10: returned %v, buffer %d; want a return %v", c.level, *evs, l.Buffer, c.back)
		}
	}
	m, ctl, l, lc, evs := predictive(t)
	_ = m.Release("a", 5000)
	lc.reactLent, lc.peakLent = 5000, 5000
	lc.level = 1500 // far above 80 %
	ctl.returnBuffer(m, "a", 0, emitter(evs, 0))
	if ret := returns(*evs, "a"); len(ret) != 1 || ret[0] != 500 || l.Buffer != 4500 {
		t.Fatalf("reactive lending with a high forecast: returned %v, want 500", ret)
	}
}

// The step back stays 10 % of the episode's largest lending until all of
// it is back, whichever parts are left.
func TestReturnStepHoldsUntilAllIsBack(t *testing.T) {
	m, ctl, l, lc, evs := predictive(t)
	_ = m.Release("a", 4000)
	lc.reactLent, lc.predLent, lc.peakLent = 3000, 1000, 20_000
	for range 3 {
		ctl.returnBuffer(m, "a", 0, emitter(evs, 0))
	}
	if ret := returns(*evs, "a"); !same(ret, []int64{2000, 2000}) || l.Buffer != 0 || lc.peakLent != 0 {
		t.Fatalf("returned %v, buffer %d, peak %d; want 2000 twice, then the episode over", ret, l.Buffer, lc.peakLent)
	}
}
