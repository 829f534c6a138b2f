package pools

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// oneLine is a resource of 200 000 with one GROWTH line: dedicated 60 000,
// borrowing 30 000 (may use 90 000), buffer 20 000.
func oneLine(t *testing.T, e Elasticity) (*Model, *Controller) {
	t.Helper()
	s := DefaultSettings()
	s.Elasticity = e
	lay, err := Plan(200_000, s, []LineSpec{{Name: "a", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return NewModel(lay, true), NewController(s, 0)
}

// sampler drives one line's consumption sample by sample (every SampleMs)
// and collects the controller's events.
type sampler struct {
	m   *Model
	c   *Controller
	now int64
	evs []Event
}

func newSampler(t *testing.T, e Elasticity) *sampler {
	m, c := oneLine(t, e)
	s := &sampler{m: m, c: c}
	s.evs = c.Tick(m, 0) // the first sample only records where consumption starts
	return s
}

// sample consumes n over the next gap ms, then ticks.
func (s *sampler) sample(n, gap int64) []Event {
	s.m.Lines["a"].Consumed += n
	s.now += gap
	evs := s.c.Tick(s.m, s.now)
	s.evs = append(s.evs, evs...)
	return evs
}

// A line's rate is what it consumed since the last sample over the time
// since it, in units per second.
func TestControllerRateIsConsumptionOverElapsedTime(t *testing.T) {
	s := newSampler(t, ElasticityPredictive)
	s.sample(3000, SampleMs) // 100/s
	s.sample(8000, 40_000)   // 200/s over 40 s
	s.sample(0, TickMs)      // not yet a sample
	got := s.c.lines["a"].rates
	if len(got) != 2 || got[0] != 100 || got[1] != 200 {
		t.Fatalf("rates %v, want [100 200]", got)
	}
	for range 5 {
		s.sample(3000, SampleMs)
	}
	if n := len(s.c.lines["a"].rates); n != 4 {
		t.Fatalf("%d rates kept, want the last 4", n)
	}
}

// Holt's forecast follows a steady trend: on a linear ramp of the rate it
// forecasts the next sample's rate.
func TestControllerForecastFollowsATrend(t *testing.T) {
	s := newSampler(t, ElasticityPredictive)
	for k := int64(1); k <= 20; k++ {
		s.sample(100*k*SampleMs/1000, SampleMs) // rate 100·k per second
	}
	if f := s.c.lines["a"].forecast; math.Abs(f-2100)/2100 > 0.005 {
		t.Fatalf("forecast %.1f/s after a ramp to 2000/s in steps of 100, want 2100 within 0.5%%", f)
	}
	// A steady rate is forecast as itself.
	s = newSampler(t, ElasticityPredictive)
	for range 10 {
		s.sample(500*SampleMs/1000, SampleMs)
	}
	if f := s.c.lines["a"].forecast; math.Abs(f-500) > 0.01 {
		t.Fatalf("forecast %.2f/s at a steady 500/s", f)
	}
}

// AUTO picks the mode by the forecast's smoothed error: an erratic line
// goes reactive (error above 30 %), a steady one back to predictive
// (within 15 %); each switch is an event.
func TestControllerAutoModeFollowsTheForecastError(t *testing.T) {
	s := newSampler(t, ElasticityAuto)
	for range 6 {
		s.sample(500*SampleMs/1000, SampleMs)
	}
	if s.c.ModeOf("a") != ModePredictive || kinds(s.evs)["MODE"] != 0 {
		t.Fatalf("steady line: mode %s, events %v", s.c.ModeOf("a"), kinds(s.evs))
	}
	for i := range 6 {
		s.sample([]int64{100, 1000}[i%2]*SampleMs/1000, SampleMs)
	}
	if s.c.ModeOf("a") != ModeReactive || kinds(s.evs)["MODE"] != 1 {
		t.Fatalf("erratic line: mode %s, events %v", s.c.ModeOf("a"), kinds(s.evs))
	}
	for range 12 {
		s.sample(500*SampleMs/1000, SampleMs)
	}
	if s.c.ModeOf("a") != ModePredictive || kinds(s.evs)["MODE"] != 2 {
		t.Fatalf("steady again: mode %s, events %v", s.c.ModeOf("a"), kinds(s.evs))
	}
	if e := s.c.lines["a"].errEWMA; e > ModePredictiveErr || e < 0 {
		t.Fatalf("smoothed error %.3f after a steady stretch", e)
	}
	// Each switch says the error that decided it, in percent.
	var pcts []float64
	for _, e := range s.evs {
		if e.Kind == "MODE" {
			var p float64
			if _, err := fmt.Sscanf(e.Reason, "forecast error %f%%", &p); err != nil {
				t.Fatalf("reason %q: %v", e.Reason, err)
			}
			pcts = append(pcts, p)
		}
	}
	// The smoothed error at most halves in a sample, so the switch back
	// happens between 7.5 % and 15 %.
	if len(pcts) != 2 || pcts[0] <= 30 || pcts[0] > 100 || pcts[1] > 15 || pcts[1] < 7 {
		t.Fatalf("errors given %v%%, want above 30 %% then 7.5 … 15 %%", pcts)
	}
	// A fixed mode is never switched.
	for _, e := range []Elasticity{ElasticityPredictive, ElasticityReactive} {
		s := newSampler(t, e)
		for i := range 12 {
			s.sample([]int64{100, 1000}[i%2]*SampleMs/1000, SampleMs)
		}
		if kinds(s.evs)["MODE"] != 0 || s.c.ModeOf("a") != Mode(e) {
			t.Errorf("%s: mode %s, events %v", e, s.c.ModeOf("a"), kinds(s.evs))
		}
	}
	if s.c.ModeOf("x") != ModePredictive {
		t.Fatal("a line starts predictive")
	}
}

// Reactive elasticity lends the free buffer when the rate doubles within
// one sample (at exactly twice, too) while the line presses on its quota
// (a period's worth at the new rate is a quarter of what it may use, or
// more); just under either bound it lends nothing.
func TestReactiveLendsAtTheBounds(t *testing.T) {
	// 37.5/s steady, then 75/s: twice the rate, and 75/s over the 300 s
	// horizon is 22 500, a quarter of the line's 90 000.
	for _, c := range []struct {
		name  string
		burst int64 // consumed in the burst's sample
		lend  bool
	}{
		{"twice, a quarter", 2250, true},
		{"just under twice", 2249, false},
	} {
		s := newSampler(t, ElasticityReactive)
		s.sample(1125, SampleMs)
		s.sample(1125, SampleMs)
		evs := s.sample(c.burst, SampleMs)
		lent := kinds(evs)["LEND_REACTIVE"] == 1 && s.m.Lines["a"].Buffer == 20_000
		if lent != c.lend {
			t.Errorf("%s: events %v, buffer lent %d; want lent=%v", c.name, evs, s.m.Lines["a"].Buffer, c.lend)
		}
		if lent && !strings.Contains(eventsOf(evs, "LEND_REACTIVE")[0].Reason, "is 2.0× the rate 30 s before") {
			t.Errorf("%s: the reason does not say by how much the rate rose: %v", c.name, evs)
		}
	}
	// Buffer already lent to the line is not part of what it presses on:
	// with 10 000 lent, a quarter of 90 000 still decides.
	s := newSampler(t, ElasticityReactive)
	_ = s.m.Release("a", 10_000)
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	if evs := s.sample(2250, SampleMs); kinds(evs)["LEND_REACTIVE"] != 1 || s.m.Lines["a"].Buffer != 20_000 {
		t.Fatalf("with buffer lent: %v, buffer %d", evs, s.m.Lines["a"].Buffer)
	}
	// The first rate of a line has no rate before it: not a burst.
	s = newSampler(t, ElasticityReactive)
	if evs := s.sample(2250, SampleMs); kinds(evs)["LEND_REACTIVE"] != 0 {
		t.Fatalf("lent on the first rate: %v", evs)
	}
	// A line waking from idle has no rate to double: not a burst.
	s = newSampler(t, ElasticityReactive)
	s.sample(0, SampleMs)
	s.sample(0, SampleMs)
	if evs := s.sample(2250, SampleMs); kinds(evs)["LEND_REACTIVE"] != 0 {
		t.Fatalf("lent to a line waking from idle: %v", evs)
	}
	// Twice the rate but far from the quota: nothing.
	s = newSampler(t, ElasticityReactive)
	s.sample(300, SampleMs)
	s.sample(300, SampleMs)
	if evs := s.sample(600, SampleMs); kinds(evs)["LEND_REACTIVE"] != 0 {
		t.Fatalf("lent to a line far from its quota: %v", evs)
	}
	// Predictive elasticity alone does not react to a burst.
	s = newSampler(t, ElasticityPredictive)
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	if evs := s.sample(2250, SampleMs); kinds(evs)["LEND_REACTIVE"] != 0 {
		t.Fatalf("predictive reacted: %v", evs)
	}
}
