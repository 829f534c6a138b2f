package pools

import (
	"fmt"
	"math"
	"sort"
)

// Controller timing and thresholds (seed 003 §3–4).
const (
	TickMs            int64 = 10_000  // the controller runs every 10 s
	SampleMs          int64 = 30_000  // each line's consumption rate is sampled every 30 s
	HorizonMs         int64 = 300_000 // predictive elasticity looks 5 minutes ahead
	ReactiveHoldMs    int64 = 300_000 // a reactive release lasts 5 minutes
	WatermarkStep     int64 = 500     // raise / lower by 5 points (basis points)
	WatermarkNear     int64 = 500     // "within 5 points of the watermark"
	WatermarkFloor    int64 = 3000    // reactive lowering never goes below 30 %
	HalfLifeMs        int64 = 60_000  // a raised or lowered watermark returns to its tier's value with this half-life
	PredictLendAbove        = 0.80    // lend when the forecast passes 80 % of what the line may use
	ModePredictiveErr       = 0.15    // forecast error within ±15 %: predictive
	ModeReactiveErr         = 0.30    // beyond 30 %: reactive
	ReturnPerTick           = 0.10    // after a peak, 10 % of what was lent goes back every 10 s
	ReclaimIdleBelow        = 0.50    // lenders use under 50 % of their dedicated part
	ReclaimMaxShare         = 0.20    // at most 20 % of a line's dedicated part per reclaim
	holtAlpha               = 0.5     // Holt's level smoothing
	holtBeta                = 0.3     // Holt's trend smoothing
)

// Mode is the elasticity mode a line is in now.
type Mode string

// Modes of a line.
const (
	ModePredictive Mode = "PREDICTIVE"
	ModeReactive   Mode = "REACTIVE"
	ModeOff        Mode = "OFF"
)

// ReclaimState is a reclaim's step.
type ReclaimState string

// Reclaim steps: WARNED → CONFIRMED → EXECUTED, or CANCELLED.
const (
	ReclaimWarned    ReclaimState = "WARNED"
	ReclaimConfirmed ReclaimState = "CONFIRMED"
	ReclaimExecuted  ReclaimState = "EXECUTED"
	ReclaimCancelled ReclaimState = "CANCELLED"
	ReclaimReturned  ReclaimState = "RETURNED" // executed, then given back to the lender
)

// Reclaim is one move of idle dedicated quota from a lender to a line that
// needs it.
type Reclaim struct {
	ID       string       `json:"id"`
	From     string       `json:"fromLine"`
	To       string       `json:"toLine"`
	Amount   int64        `json:"amount"` // proposed; once EXECUTED, what moved
	State    ReclaimState `json:"state"`
	DryRun   bool         `json:"dryRun"`
	WarnedMs int64        `json:"warnedAtMs"`
	UpdateMs int64        `json:"updatedAtMs"`
	Reason   string       `json:"reason"`
	moved    int64        // what this controller executed (Amount shrinks as it is given back)
}

// Event is one controller decision, with its reason; the service audits it
// and counts it in metrics.
type Event struct {
	AtMs   int64  `json:"atMs"`
	Kind   string `json:"kind"` // WATERMARK_RAISED, WATERMARK_LOWERED, WATERMARK_DECAYED, LEND_PREDICTIVE, LEND_REACTIVE, RETURN, MODE, RECLAIM_*, GIVE_BACK
	Line   string `json:"businessLine,omitempty"`
	To     string `json:"toLine,omitempty"` // RECLAIM_EXECUTED, GIVE_BACK: the borrowing line
	Amount int64  `json:"amount,omitempty"` // buffer lent or returned, quota reclaimed, or the new watermark (basis points)
	Reason string `json:"reason"`
	Mode   Mode   `json:"mode,omitempty"` // MODE: the line's new mode
	// Ref, when set, makes the event's journal entry idempotent: an event
	// with a ref the resource's journal has is not stored again (the
	// spare buffer's moves, SpareMove.Events). Not shown.
	Ref string `json:"-"`
}

// lineCtl is the controller's memory of one line.
type lineCtl struct {
	lastConsumed  int64
	rates         []float64 // last samples, units per second, oldest first (at most 4)
	level, trend  float64   // Holt's state
	holtReady     bool
	forecast      float64 // forecast for the next sample
	errEWMA       float64
	mode          Mode
	predLent      int64 // buffer lent by predictive elasticity
	reactLent     int64 // buffer lent by reactive elasticity
	peakLent      int64 // largest amount lent in this episode: returns are 10 % of it per tick
	reactiveUntil int64
	burstBase     float64 // the rate before the burst that started the reactive release
	raised        bool    // the watermark was raised at the last sample
	gaveBackMs    int64   // when a reclaim last gave quota back to the line (0 = never)
}

// Controller makes the periodic decisions for one resource. It is not safe
// for concurrent use; the service runs one per resource under a lock.
type Controller struct {
	Settings Settings
	PeriodMs int64 // the policy's period length (ms); ≤ 0 = longer than any horizon
	lines    map[string]*lineCtl
	// guardHeld is the buffer guardShared put into the shared pool and has
	// not taken back; guardPeak the most it held in the episode.
	guardHeld, guardPeak int64
	lastTick             int64
	sampled              int64 // when rates were last sampled (ms), valid when didSample
	didSample            bool
	epoch                string // the Model.Epoch of the last tick
	Reclaims             []*Reclaim
	nextID               int
	// Released is the buffer operators lent and that has not expired, by
	// line ("" = the shared pool), set by the caller before each Tick. Buffer
	// lent beyond it and beyond what this controller lent (its memory was
	// lost: another instance lent it, or a release expired while sessions
	// held part of it) is adopted and returned as past a peak.
	Released map[string]int64
}

// NewController returns a controller for the settings; periodMs is the
// length of one period (0 for periods of a day or more).
func NewController(s Settings, periodMs int64) *Controller {
	return &Controller{Settings: s, PeriodMs: periodMs, lines: map[string]*lineCtl{}, lastTick: math.MinInt64}
}

func (c *Controller) line(name string) *lineCtl {
	lc := c.lines[name]
	if lc == nil {
		lc = &lineCtl{mode: ModePredictive}
		c.lines[name] = lc
	}
	return lc
}

// ModeOf returns the line's elasticity mode now.
func (c *Controller) ModeOf(line string) Mode {
	return c.Settings.ModeOf(c.line(line).mode)
}

// ModeOf is the elasticity mode of a line whose controller chose auto (""
// = not chosen yet: predictive) under these settings: OFF, PREDICTIVE and
// REACTIVE pin it.
func (s Settings) ModeOf(auto Mode) Mode {
	switch s.Elasticity {
	case ElasticityOff:
		return ModeOff
	case ElasticityPredictive:
		return ModePredictive
	case ElasticityReactive:
		return ModeReactive
	}
	if auto == "" {
		return ModePredictive
	}
	return auto
}

// Tick runs the decisions due at now (ms) against m and returns them. Call
// it every TickMs; rates are sampled every SampleMs of the calls' clock.
// With elasticity OFF it does nothing (reclaims included, except confirming
// or cancelling ones already open).
func (c *Controller) Tick(m *Model, now int64) []Event {
	var evs []Event
	emit := emitter(&evs, now)
	names := make([]string, 0, len(m.Lines))
	for n := range m.Lines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := c.lines[n]; !ok && m.Lines[n].Mode != "" {
			c.line(n).mode = m.Lines[n].Mode // the mode another instance's controller left
		}
	}
	if c.didSample && m.Epoch != c.epoch {
		c.forgetRates()
	}
	c.epoch = m.Epoch
	for _, n := range names {
		c.forgetTaken(m.Lines[n], c.line(n))
	}
	c.advanceReclaims(m, now, emit)
	if c.Settings.Elasticity == ElasticityOff {
		// Nothing is decided, but buffer an apply put into the shared pool
		// (Model.SpareToShared) goes back once the pool does not hold it,
		// as below: it is not left there for good.
		c.returnUnowned(m, emit)
		return evs
	}
	if !c.didSample || now-c.sampled >= SampleMs {
		// The first sample's dt is never used: that sample only records
		// where consumption starts (a mutant of it is equivalent).
		dt := float64(SampleMs) / 1000
		if c.didSample {
			dt = float64(now-c.sampled) / 1000
		}
		for _, n := range names {
			c.sampleLine(m, n, now, dt, c.didSample, emit)
		}
		c.sampled, c.didSample = now, true
		c.reclaim(m, now, names, emit)
	}
	c.guardShared(m, names, emit)
	for _, n := range names {
		c.adopt(m.Lines[n], c.line(n))
		c.returnBuffer(m, n, now, emit)
	}
	c.returnUnowned(m, emit)
	c.lastTick = now
	return evs
}

// forgetRates drops every line's rate history (samples, Holt's state, the
// forecast error) after the store lost the consumption counters they come
// from: the next sample only records where consumption starts again, so no
// rate spans the loss and none is compared with a sample from before it.
// What was lent, reactive holds and the modes stay.
func (c *Controller) forgetRates() {
	for _, lc := range c.lines {
		lc.rates, lc.level, lc.trend, lc.holtReady, lc.forecast, lc.errEWMA, lc.raised = nil, 0, 0, false, 0, 0, false
	}
	c.didSample = false
}

// emitFunc records a decision and returns it, for the caller to add To.
type emitFunc func(kind, line string, amount int64, format string, a ...any) *Event

func emitter(evs *[]Event, now int64) emitFunc {
	return func(kind, line string, amount int64, format string, a ...any) *Event {
		*evs = append(*evs, Event{AtMs: now, Kind: kind, Line: line, Amount: amount, Reason: fmt.Sprintf(format, a...)})
		return &(*evs)[len(*evs)-1]
	}
}

func (c *Controller) sampleLine(m *Model, name string, now int64, dt float64, have bool, emit emitFunc) {
	l, lc := m.Lines[name], c.line(name)
	rate := float64(l.Consumed-lc.lastConsumed) / dt
	back := l.Consumed < lc.lastConsumed // Redis lost the counter: no rate this time
	lc.lastConsumed = l.Consumed
	if !have || back {
		return
	}
	prev := -1.0
	if len(lc.rates) > 0 {
		prev = lc.rates[len(lc.rates)-1]
	}
	lc.rates = append(lc.rates, rate)
	if len(lc.rates) > 4 {
		lc.rates = lc.rates[1:]
	}
	// Forecast error of the last forecast, smoothed; picks the mode (AUTO).
	prevLevel := lc.level
	if lc.holtReady {
		e := math.Abs(lc.forecast-rate) / math.Max(rate, math.Max(lc.forecast, 1e-9))
		lc.errEWMA = 0.5*lc.errEWMA + 0.5*e
		if c.Settings.Elasticity == ElasticityAuto {
			switch {
			case lc.errEWMA <= ModePredictiveErr && lc.mode != ModePredictive:
				lc.mode = ModePredictive
				emit("MODE", name, 0, "forecast error %.0f%% ≤ 15%%: predictive", lc.errEWMA*100).Mode = ModePredictive
			case lc.errEWMA > ModeReactiveErr && lc.mode != ModeReactive:
				lc.mode = ModeReactive
				emit("MODE", name, 0, "forecast error %.0f%% > 30%%: reactive", lc.errEWMA*100).Mode = ModeReactive
			}
		}
		lc.level = holtAlpha*rate + (1-holtAlpha)*(lc.level+lc.trend)
		lc.trend = holtBeta*(lc.level-prevLevel) + (1-holtBeta)*lc.trend
	} else {
		lc.level, lc.trend, lc.holtReady = rate, 0, true
	}
	lc.forecast = math.Max(0, lc.level+lc.trend)
	mode := c.ModeOf(name)
	c.watermark(l, lc, name, now, emit)

	// Reactive: the rate doubled within one sample (30 s), measured against
	// the smoothed rate before it (one noisy sample is not a burst), and the
	// line is pressing on its quota (a quarter of a period's worth or more).
	if (mode == ModeReactive || c.Settings.Elasticity == ElasticityAuto) && prev > 0 && rate >= 2*max(prev, prevLevel) &&
		rate*c.periodSeconds() >= 0.25*float64(l.MayUse()-l.Buffer) && lc.reactiveUntil <= now {
		if free := m.BufferFree(); free > 0 {
			_ = m.Release(name, free)
			lc.reactLent += free
			lc.peakLent = max(lc.peakLent, lc.predLent+lc.reactLent)
			emit("LEND_REACTIVE", name, free, "rate %.0f/s is %.1f× the rate 30 s before: the remaining buffer for 5 minutes (alert)", rate, rate/prev)
		}
		// The hold, and the gentle lowering after it, only for a line that
		// holds buffer from a reactive release: one that got none was
		// given nothing to hold.
		if lc.reactLent > 0 {
			lc.reactiveUntil, lc.burstBase = now+ReactiveHoldMs, max(prev, prevLevel)
		}
	}
	// Still high after the reactive release: lower the watermark gently —
	// never a CORE line's (its critical applies pass it anyway, and its
	// previews are what the 95 % keeps), and only while the line still
	// holds buffer of the release: the throttle eases a line off the
	// reserve as the buffer goes back. Once it is all back (returned past
	// the hold, or taken into a short shared pool) the line draws only what
	// pools alone would give it, and a watermark still being lowered would
	// refuse it what they grant (issue 21 §2: elasticity never makes
	// refusals worse than pools alone; TestGentleLoweringEndsWithTheBuffer).
	if lc.reactiveUntil != 0 && now >= lc.reactiveUntil && lc.reactLent == 0 {
		lc.reactiveUntil, lc.burstBase = 0, 0
	}
	if lc.reactiveUntil != 0 && now >= lc.reactiveUntil && lc.burstBase > 0 && rate >= 2*lc.burstBase &&
		l.Tier != TierCore && l.Watermark-WatermarkStep >= WatermarkFloor {
		l.Watermark -= WatermarkStep
		emit("WATERMARK_LOWERED", name, l.Watermark, "rate still %.1f× its pre-burst rate 5 minutes after the release", rate/lc.burstBase)
	}
	if lc.reactiveUntil != 0 && now >= lc.reactiveUntil && rate < 2*lc.burstBase {
		lc.reactiveUntil, lc.burstBase = 0, 0
	}
	if mode == ModePredictive {
		c.predict(m, l, lc, name, emit)
	}
}

// periodSeconds is the length of one period in seconds, or the horizon for
// long periods.
func (c *Controller) periodSeconds() float64 {
	if c.PeriodMs > 0 && c.PeriodMs <= HorizonMs {
		return float64(c.PeriodMs) / 1000
	}
	return float64(HorizonMs) / 1000
}

// watermark raises a line's watermark 5 points when its rate rose in 3
// samples in a row and its use is within 5 points of the watermark (never
// above 95 %), and otherwise lets a moved watermark return to its tier's
// value with a 60 s half-life.
func (c *Controller) watermark(l *LineState, lc *lineCtl, name string, now int64, emit emitFunc) {
	base := l.Tier.BaseWatermark()
	r := lc.rates
	rising := len(r) == 4 && r[1] > r[0] && r[2] > r[1] && r[3] > r[2]
	usedBP := int64(0)
	if l.MayUse() > 0 {
		usedBP = l.Used() * 10000 / l.MayUse()
	}
	if rising && usedBP >= l.Watermark-WatermarkNear && l.Watermark < MaxWatermark {
		l.Watermark = min(l.Watermark+WatermarkStep, MaxWatermark)
		lc.raised = true
		emit("WATERMARK_RAISED", name, l.Watermark, "rate rose in 3 samples in a row and use is %d.%02d%%, within 5 points", usedBP/100, usedBP%100)
		return
	}
	lc.raised = false
	if l.Watermark == base || (lc.reactiveUntil != 0 && now >= lc.reactiveUntil) {
		return
	}
	// Half-life decay: the gap shrinks by 2^(−30 s / 60 s) per sample.
	gap := float64(l.Watermark - base)
	next := base + int64(math.Round(gap*math.Pow(0.5, float64(SampleMs)/float64(HalfLifeMs))))
	if abs(next-base) < 10 {
		next = base
	}
	if next != l.Watermark {
		l.Watermark = next
		emit("WATERMARK_DECAYED", name, l.Watermark, "no rise: back towards the tier's %d.%02d%% (half-life 60 s)", base/100, base%100)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// predict lends buffer ahead of a forecast peak: when the forecast use over
// the next 5 minutes passes 80 % of what the line may use in that time.
func (c *Controller) predict(m *Model, l *LineState, lc *lineCtl, name string, emit emitFunc) {
	demand, baseMay := c.demand(l, lc)
	need := int64(math.Ceil(demand - PredictLendAbove*baseMay))
	if demand <= PredictLendAbove*baseMay || need <= lc.predLent {
		return
	}
	x := min(need-lc.predLent, m.BufferFree())
	if x <= 0 {
		return
	}
	_ = m.Release(name, x)
	lc.predLent += x
	lc.peakLent = max(lc.peakLent, lc.predLent+lc.reactLent)
	emit("LEND_PREDICTIVE", name, x, "forecast %.0f per period is above 80%% of %.0f (Holt, 5 minutes ahead): the line is told quota is getting tight", demand, baseMay)
}

// demand is the forecast use in one period (or in the horizon, for long
// periods) and what the line may use in that window (mayUseAhead).
func (c *Controller) demand(l *LineState, lc *lineCtl) (demand, baseMay float64) {
	// Average forecast rate over the horizon (Holt: level + trend·h, h = 1 … k).
	k := float64(HorizonMs / SampleMs)
	f := math.Max(0, lc.level+lc.trend*(k+1)/2)
	return f * c.periodSeconds(), c.mayUseAhead(l)
}

// adopt makes what this controller counts as lent to the line match the
// buffer the line holds beyond the active operator releases: buffer no one
// accounts for is counted as lent by reactive elasticity (so that
// returnBuffer gives it back), and what it counts but the line no longer
// holds is forgotten (never taking back an operator's release). Only when
// the caller says what operators released (Released non-nil).
func (c *Controller) adopt(l *LineState, lc *lineCtl) {
	if c.Released == nil {
		return
	}
	mine := max(0, l.Buffer-c.Released[l.Name])
	if o := mine - lc.predLent - lc.reactLent; o > 0 {
		lc.reactLent += o
		lc.peakLent = max(lc.peakLent, lc.predLent+lc.reactLent)
	}
	c.forgetTaken(l, lc)
}

// forgetTaken forgets what this controller counts as lent to the line and
// the line no longer has beyond the active operator releases (Released;
// none when nil): an apply put it into the shared pool
// (Model.SpareToShared), or another instance returned it. Else a reactive
// hold would outlive its buffer (the gentle lowering lowers only while the
// line holds buffer of the release) and returns would count buffer that is
// gone.
func (c *Controller) forgetTaken(l *LineState, lc *lineCtl) {
	mine := max(0, l.Buffer-c.Released[l.Name])
	if o := lc.predLent + lc.reactLent - mine; o > 0 {
		x := min(o, lc.reactLent)
		lc.reactLent -= x
		lc.predLent -= min(o-x, lc.predLent)
		if lc.predLent+lc.reactLent == 0 {
			lc.peakLent = 0
		}
	}
}

// mayUseAhead is what the line may use in the forecast's window, its lent
// buffer aside: a period's worth, or, for periods longer than the horizon,
// what it has not used yet of this one. predict lends against it and
// returnBuffer holds the lent buffer while the forecast stays above 80 % of
// it (with two measures the two would lend and return in turn).
func (c *Controller) mayUseAhead(l *LineState) float64 {
	if c.PeriodMs <= 0 || c.PeriodMs > HorizonMs {
		return float64(l.MayUse() - l.Buffer - l.Used())
	}
	return float64(l.MayUse() - l.Buffer)
}

// returnBuffer gives back 10 % of the episode's lent buffer every tick once
// the line is past its peak (forecast below 80 %, no reactive hold).
func (c *Controller) returnBuffer(m *Model, name string, now int64, emit emitFunc) {
	lc, l := c.line(name), m.Lines[name]
	if lc.predLent+lc.reactLent == 0 || lc.reactiveUntil > now {
		return
	}
	if c.ModeOf(name) == ModePredictive && lc.predLent > 0 {
		if f, may := c.demand(l, lc); f > PredictLendAbove*may {
			return // still at the peak
		}
	}
	step := max(1, int64(math.Ceil(float64(lc.peakLent)*ReturnPerTick)))
	got := m.Return(name, min(step, lc.predLent+lc.reactLent))
	if got == 0 {
		return
	}
	fromReact := min(got, lc.reactLent)
	lc.reactLent -= fromReact
	lc.predLent -= got - fromReact
	if lc.predLent+lc.reactLent == 0 {
		lc.peakLent = 0
	}
	emit("RETURN", name, got, "past the peak: 10%% of the lent buffer back every 10 s")
}

// returnUnowned gives back the buffer in the shared pool that no active
// release holds and the short pool's rule does not (an apply put it there,
// or a release expired while sessions held it), as far as the pool does not
// hold it; only when the caller says what operators released (Released).
func (c *Controller) returnUnowned(m *Model, emit emitFunc) {
	if o := m.SharedBuffer - c.Released[""] - c.guardHeld; o > 0 && c.Released != nil {
		if got := m.Return("", o); got > 0 {
			emit("RETURN", "", got, "buffer in the shared pool that no active release holds")
		}
	}
}
