package pools

import (
	"fmt"
	"testing"
)

// lossWorld: one GROWTH line with a 60-s period and a buffer, reactive
// elasticity, fed a steady 20 000 units per 30-s sample (667/s: a period's
// worth is 40 000 of a may-use of 225 000, past the reactive rule's quarter
// only when the rate doubles).
type lossWorld struct {
	t   *testing.T
	m   *Model
	c   *Controller
	now int64
	evs []Event
}

func newLossWorld(t *testing.T, mode Elasticity) *lossWorld {
	lay, err := Plan(1_000_000, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierGrowth, Weight: 1}, {Name: "b", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s := DefaultSettings()
	s.Elasticity = mode
	return &lossWorld{t: t, m: NewModel(lay, true), c: NewController(s, 60_000)}
}

// sample runs the three ticks of one 30-s sample, then feeds amount.
func (w *lossWorld) sample(amount int64) {
	for range 3 {
		w.evs = append(w.evs, w.c.Tick(w.m, w.now)...)
		w.now += TickMs
		w.m.NewPeriod(w.now / 60_000)
	}
	feed(w.t, w.m, "a", amount, fmt.Sprint(w.now))
}

// moves are the events that need a history: a reactive release (a rate
// compared with the one before), a watermark moved, a mode chosen from the
// forecast's error. A predictive lend needs one measured rate only: a line
// whose first measured rate forecasts past 80 % gets it, history or not.
func moves(evs []Event) []Event {
	var out []Event
	for _, e := range evs {
		switch e.Kind {
		case "LEND_REACTIVE", "WATERMARK_RAISED", "WATERMARK_LOWERED", "MODE":
			out = append(out, e)
		}
	}
	return out
}

// A controller with no history (a new instance took the resource over, or
// Redis lost the counters its rates come from) and a line already running
// at a high rate: the first sample only records where consumption is, the
// second has no earlier rate to double from, and three samples are not
// enough for "rising in 3 samples in a row": no move until the history is
// back.
func TestEmptyHistoryMakesNoMoveOnTheFirstSamples(t *testing.T) {
	for _, mode := range []Elasticity{ElasticityAuto, ElasticityReactive} {
		w := newLossWorld(t, mode)
		w.m.Lines["a"].Consumed = 5_000_000 // consumption so far, unknown to the controller
		for _, n := range []int64{80_000, 90_000, 100_000} {
			w.sample(n) // 2.7k–3.3k/s, rising: a burst for a controller that knew 667/s
		}
		if mv := moves(w.evs); len(mv) != 0 {
			t.Fatalf("%s: moves with an empty history: %+v", mode, mv)
		}
	}
	// The same rates after a known steady 667/s are a burst: the rule is live.
	w := newLossWorld(t, ElasticityReactive)
	for range 4 {
		w.sample(20_000)
	}
	w.sample(80_000)
	w.sample(80_000)
	if kinds(w.evs)["LEND_REACTIVE"] != 1 {
		t.Fatalf("no reactive release after a known rate quadrupled: %v", w.evs)
	}
}

// Redis loses the consumption counter (with the layout) one sample after
// the controller started: the counter starts again at 0 and, by the next
// sample, is just past where the controller last saw it. Without knowing
// of the loss, the controller took that for a rate of almost 0 and the next
// sample, 10 % up, for a doubling (against the smoothed level the near-0
// pulled down to half): a reactive release of the whole buffer out of a
// rate that barely moved. The layout's new epoch tells it to start its
// history again.
func TestRedisLossOfTheCountersIsNoBurst(t *testing.T) {
	w := newLossWorld(t, ElasticityReactive)
	w.m.Epoch = "1"
	w.sample(40_000) // 1333/s: a period's worth is 80 000, past a quarter of 225 000
	w.sample(40_000)
	// Redis lost the layout and its counters just after the last sample;
	// the feed since is all the new counter holds.
	w.m.Epoch, w.m.Lines["a"].Consumed = "2", 40_030
	for range 6 {
		w.sample(44_000)
	}
	if mv := moves(w.evs); len(mv) != 0 {
		t.Fatalf("moves after the counters were lost, the rate up 10 %%: %+v", mv)
	}
	// After the loss the history is back: a real burst still fires.
	w.sample(160_000)
	w.sample(160_000)
	if kinds(w.evs)["LEND_REACTIVE"] != 1 {
		t.Fatalf("no reactive release of a burst after the loss: %v", w.evs)
	}
}
