package pools

import (
	"strings"
	"testing"
)

func eventsOf(evs []Event, kind string) []Event {
	var out []Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// A line's watermark rises 5 points when its rate rose in 3 samples in a
// row and its use is within 5 points of the watermark, never above 95 %;
// then, without a rise, it returns to its tier's value with a 60 s
// half-life (the gap shrinks by 2^−½ per 30 s sample, snapping to the
// tier's value under 10 basis points).
func TestWatermarkRisesNearItAndDecaysWithAHalfLife(t *testing.T) {
	for _, c := range []struct {
		name  string
		used  int64 // of the line's 90 000
		start int64 // watermark before, basis points
		want  int64 // after the rising samples
	}{
		{"use 5 points under the watermark", 67_500, 8000, 8500},
		{"use just further under", 67_499, 8000, 8000},
		{"capped at 95 %", 85_000, 9300, 9500},
	} {
		s := newSampler(t, ElasticityPredictive)
		a := s.m.Lines["a"]
		a.UsedDedicated, a.UsedShared = min(c.used, 60_000), c.used-min(c.used, 60_000)
		for k := int64(1); k <= 3; k++ {
			s.sample(30*k, SampleMs) // 1, 2, 3 per second: rising, far below any lending
		}
		a.Watermark = c.start
		s.sample(120, SampleMs) // the third rise in a row
		if a.Watermark != c.want {
			t.Errorf("%s: watermark %d, want %d (events %v)", c.name, a.Watermark, c.want, s.evs)
		}
		if raised := eventsOf(s.evs, "WATERMARK_RAISED"); (len(raised) == 1) != (c.want != c.start) || (len(raised) == 1 && raised[0].Amount != c.want) {
			t.Errorf("%s: raise events %v", c.name, raised)
		}
	}
	// At 95 % it is not raised further.
	s := newSampler(t, ElasticityPredictive)
	a := s.m.Lines["a"]
	a.UsedDedicated, a.UsedShared = 60_000, 25_000
	for k := int64(1); k <= 3; k++ {
		s.sample(30*k, SampleMs)
	}
	a.Watermark = MaxWatermark
	s.sample(120, SampleMs)
	if a.Watermark > MaxWatermark || len(eventsOf(s.evs, "WATERMARK_RAISED")) != 0 {
		t.Fatalf("at 95 %%: watermark %d, events %v", a.Watermark, s.evs)
	}

	s = newSampler(t, ElasticityPredictive)
	a = s.m.Lines["a"]
	a.UsedDedicated, a.UsedShared = 60_000, 7_500
	for k := int64(1); k <= 4; k++ {
		s.sample(30*k, SampleMs)
	}
	if a.Watermark != 8500 {
		t.Fatalf("not raised: %d", a.Watermark)
	}
	var path []int64
	for range 14 {
		s.sample(120, SampleMs) // steady: no rise
		path = append(path, a.Watermark)
	}
	want := []int64{8354, 8250, 8177, 8125, 8088, 8062, 8044, 8031, 8022, 8016, 8011, 8000, 8000, 8000}
	for i := range want {
		if path[i] != want[i] {
			t.Fatalf("decay %v, want %v", path, want)
		}
	}
	if n := len(eventsOf(s.evs, "WATERMARK_DECAYED")); n != 12 {
		t.Fatalf("%d decay events, want one per change (12)", n)
	}
}

// A reactive release holds for 5 minutes: no buffer goes back meanwhile.
// If the rate is still twice its pre-burst rate when the hold ends, the
// watermark is lowered 5 points a sample (never under 30 %), and the buffer
// goes back 10 % of what was lent per tick; once the rate falls the hold
// is over and the watermark returns.
func TestReactiveHoldLowersTheWatermarkWhileTheBurstLasts(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	a := s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs) // the burst, at 90 s: the whole free buffer, held to 390 s
	if a.Buffer != 20_000 {
		t.Fatalf("not lent: %+v", a)
	}
	for s.now < 360_000 {
		evs := s.sample(2250, SampleMs)
		if len(eventsOf(evs, "RETURN")) != 0 || len(eventsOf(evs, "WATERMARK_LOWERED")) != 0 {
			t.Fatalf("at %d ms, inside the hold: %v", s.now, evs)
		}
	}
	evs := s.sample(2250, SampleMs) // 390 s: the hold ends, the rate still twice
	low, ret := eventsOf(evs, "WATERMARK_LOWERED"), eventsOf(evs, "RETURN")
	if len(low) != 1 || low[0].Amount != 7500 || a.Watermark != 7500 || len(ret) != 1 || ret[0].Amount != 2000 ||
		!strings.Contains(low[0].Reason, "still 2.0× its pre-burst rate") {
		t.Fatalf("at the hold's end: %v", evs)
	}
	s.sample(2250, SampleMs)
	if a.Watermark != 7000 {
		t.Fatalf("still bursting: watermark %d, want 7000", a.Watermark)
	}
	// The rate falls back: no more lowering, the watermark returns.
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	if a.Watermark <= 7000 || len(eventsOf(s.evs, "WATERMARK_LOWERED")) != 2 {
		t.Fatalf("after the burst: watermark %d, %d lowerings", a.Watermark, len(eventsOf(s.evs, "WATERMARK_LOWERED")))
	}
	for range 20 {
		s.sample(1125, SampleMs)
	}
	if a.Buffer != 0 {
		t.Fatalf("buffer %d left after the burst", a.Buffer)
	}

	// A burst that lasts: lowered down to the floor, not under.
	s = newSampler(t, ElasticityReactive)
	a = s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	for range 11 {
		s.sample(2250, SampleMs)
	}
	if a.Watermark != 7500 {
		t.Fatalf("at the hold's end: watermark %d", a.Watermark)
	}
	a.Watermark = 3400
	s.sample(2250, SampleMs)
	if a.Watermark != 3400 {
		t.Fatalf("lowered to %d, under the 30 %% floor", a.Watermark)
	}
	a.Watermark = 3500
	s.sample(2250, SampleMs)
	if a.Watermark != 3000 {
		t.Fatalf("lowered to %d, want the floor 3000", a.Watermark)
	}
}

// The gentle lowering after a reactive hold lasts only while the line
// holds buffer of the release: once the buffer is all back (10 % a tick
// past the hold), a burst that goes on is no longer lowered and the
// watermark returns to its tier's value. Before, it went on down to the
// floor (30 %) with the buffer long gone, refusing a line that borrowed
// from a shared pool with a fifth to two fifths free what pools alone
// grant (the conversation trace: 11 watermark refusals against none).
func TestGentleLoweringEndsWithTheBuffer(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	a := s.m.Lines["a"]
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	s.sample(2250, SampleMs) // the burst: the whole free buffer, held 5 minutes
	if a.Buffer != 20_000 {
		t.Fatalf("not lent: %+v", a)
	}
	for a.Buffer > 0 && s.now < 3_600_000 {
		s.sample(2250, SampleMs) // the burst goes on; past the hold the buffer goes back
	}
	lowest := a.Watermark
	if lowest >= 8000 {
		t.Fatalf("not lowered while the buffer went back: watermark %d", lowest)
	}
	n := len(eventsOf(s.evs, "WATERMARK_LOWERED"))
	for range 20 {
		s.sample(2250, SampleMs) // still twice the pre-burst rate
	}
	if got := len(eventsOf(s.evs, "WATERMARK_LOWERED")); got != n || a.Watermark <= lowest {
		t.Fatalf("with the buffer back: %d more lowerings, watermark %d (lowest %d)", got-n, a.Watermark, lowest)
	}
}

// Predictive elasticity lends buffer when the forecast use of a period
// passes 80 % of what the line may use (at exactly 80 % it does not), what
// it is over by, once per level; past the peak the buffer goes back 10 %
// of what was lent per tick.
func TestPredictiveLendsAheadOfThePeakAndReturnsAfter(t *testing.T) {
	run := func(rate int64) (*sampler, *LineState) {
		m, _ := oneLine(t, ElasticityPredictive)
		s := &sampler{m: m, c: NewController(func() Settings { x := DefaultSettings(); x.Elasticity = ElasticityPredictive; return x }(), 60_000)}
		s.evs = s.c.Tick(m, 0)
		for range 3 {
			s.sample(rate*SampleMs/1000, SampleMs)
		}
		return s, m.Lines["a"]
	}
	// A period (60 s) at 1200/s is 72 000, 80 % of the 90 000 the line may use.
	if s, _ := run(1200); len(eventsOf(s.evs, "LEND_PREDICTIVE")) != 0 {
		t.Fatalf("lent at exactly 80 %%: %v", s.evs)
	}
	s, a := run(1201)
	if lend := eventsOf(s.evs, "LEND_PREDICTIVE"); len(lend) != 1 || lend[0].Amount != 60 || a.Buffer != 60 {
		t.Fatalf("at 1201/s: %v, buffer %d; want one lending of 60", lend, a.Buffer)
	}
	s, a = run(1500) // 90 000 a period: 18 000 over
	if lend := eventsOf(s.evs, "LEND_PREDICTIVE"); len(lend) != 1 || lend[0].Amount != 18_000 || a.Buffer != 18_000 {
		t.Fatalf("at 1500/s: %v, buffer %d; want one lending of 18 000", lend, a.Buffer)
	}
	if len(eventsOf(s.evs, "RETURN")) != 0 {
		t.Fatalf("returned at the peak: %v", s.evs)
	}
	for range 30 {
		s.sample(100*SampleMs/1000, SampleMs)
	}
	ret := eventsOf(s.evs, "RETURN")
	if a.Buffer != 0 || len(ret) != 10 || ret[0].Amount != 1800 {
		t.Fatalf("past the peak: buffer %d, returns %v; want 10 of 1800", a.Buffer, ret)
	}
	// More than the free buffer is never lent.
	s, a = run(3000) // 180 000 a period: 108 000 over, 20 000 free
	if a.Buffer != 20_000 || s.m.BufferFree() != 0 {
		t.Fatalf("at 3000/s: buffer %d, free %d", a.Buffer, s.m.BufferFree())
	}
}

// The forecast that decides a predictive lending is the average rate over
// the next 5 minutes (Holt's level plus its trend over 1 … 10 samples:
// level + trend·5.5), over one period.
func TestPredictiveForecastIncludesTheTrend(t *testing.T) {
	m, _ := oneLine(t, ElasticityPredictive)
	st := DefaultSettings()
	st.Elasticity = ElasticityPredictive
	s := &sampler{m: m, c: NewController(st, 60_000)}
	s.evs = s.c.Tick(m, 0)
	s.sample(30_000, SampleMs)
	// Level 960/s rising 40/s a sample; the next sample at 1000/s keeps
	// the trend: the average over the horizon is 1000 + 40·5.5 = 1220/s,
	// 73 200 a period, 1200 over 80 % of the 90 000 the line may use.
	lc := s.c.lines["a"]
	lc.level, lc.trend, lc.forecast = 960, 40, 1000
	evs := s.sample(30_000, SampleMs)
	if lend := eventsOf(evs, "LEND_PREDICTIVE"); len(lend) != 1 || lend[0].Amount != 1200 {
		t.Fatalf("lent %v, want 1200 (level %.1f, trend %.1f)", lend, lc.level, lc.trend)
	}
}

// For periods longer than the horizon, what the line may still use in the
// period is what it has not used yet: a line that has used most of its
// quota gets buffer ahead of a forecast that an idle one would not need.
func TestPredictiveLongPeriodsCountWhatIsUsed(t *testing.T) {
	for _, c := range []struct {
		used, lend int64
	}{{0, 0}, {60_000, 6_000}} {
		s := newSampler(t, ElasticityPredictive) // PeriodMs 0: longer than the horizon
		a := s.m.Lines["a"]
		a.UsedDedicated = c.used
		for range 3 {
			s.sample(100*SampleMs/1000, SampleMs) // 100/s: 30 000 over the 5 minutes
		}
		var lent int64
		for _, e := range eventsOf(s.evs, "LEND_PREDICTIVE") {
			lent += e.Amount
		}
		// 80 % of the 30 000 left is 24 000: 6 000 over, lent once and
		// kept while the forecast stays there (not returned and lent again).
		if lent != c.lend || len(eventsOf(s.evs, "RETURN")) != 0 || a.Buffer != c.lend {
			t.Errorf("used %d: lent %d, buffer %d, events %v; want %d lent once", c.used, lent, a.Buffer, s.evs, c.lend)
		}
	}
}

// After a reactive window the watermark is lowered only on a line that got
// buffer in it, and never on a CORE line (issue 21: lines that never got
// buffer, CORE among them, were lowered down to 60 %).
func TestReactiveWindowLowersOnlyLinesThatGotBuffer(t *testing.T) {
	for _, c := range []struct {
		name       string
		tier       Tier
		bufferFree bool
		lowered    bool
	}{
		{"GROWTH with buffer", TierGrowth, true, true},
		{"GROWTH, the buffer all lent elsewhere", TierGrowth, false, false},
		{"CORE with buffer", TierCore, true, false},
	} {
		s := newSampler(t, ElasticityReactive)
		a := s.m.Lines["a"]
		a.Tier, a.Watermark = c.tier, c.tier.BaseWatermark()
		if !c.bufferFree {
			if err := s.m.Release("", s.m.BufferFree()); err != nil {
				t.Fatal(err)
			}
		}
		s.sample(1125, SampleMs)
		s.sample(1125, SampleMs)
		for range 14 { // the burst at 90 s, still twice the rate past 390 s
			s.sample(2250, SampleMs)
		}
		if got := len(eventsOf(s.evs, "WATERMARK_LOWERED")) > 0; got != c.lowered || (!c.lowered && a.Watermark < c.tier.BaseWatermark()) {
			t.Errorf("%s: lowered %v (watermark %d), want %v", c.name, got, a.Watermark, c.lowered)
		}
	}
}
