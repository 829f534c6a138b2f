package pools

import (
	"fmt"
	"slices"
	"sort"
)

// Request is one call of a simulated workload.
type Request struct {
	AtMs         int64  // arrival, ms from the start of the run
	Line         string // business line
	Amount       int64  // what the apply asks for
	Actual       int64  // what the finish reports
	DurationMs   int64  // apply → finish
	Critical     bool
	Continuation bool
	Burst        bool // injected by a burst, or arriving on a bursting line during its burst
}

// Burst is a window in which one line's traffic was multiplied.
type Burst struct {
	Line    string
	StartMs int64
	EndMs   int64
	Factor  float64
}

// Workload is a run's input: requests sorted by AtMs, the lines, the
// bursts injected.
type Workload struct {
	Requests []Request
	Lines    []LineSpec
	Bursts   []Burst
}

// Scheme is one way of dividing the quota that Simulate compares.
type Scheme string

// The three schemes of seed 003's comparison.
const (
	SchemeStatic  Scheme = "static"  // each line a fixed quota, its weight's share of the limit
	SchemePools   Scheme = "pools"   // shared / dedicated / buffer pools and borrowing; no tiers, no controller
	SchemeElastic Scheme = "elastic" // pools + tiers and watermarks + the controller (elasticity, reclaim)
)

// SimConfig is one simulated run.
type SimConfig struct {
	Scheme   Scheme
	Limit    int64 // per period
	PeriodMs int64
	Settings Settings
}

// Result is what a run measured. Percentages are 0 … 100.
type Result struct {
	Scheme          Scheme
	Requests        int
	Refused         int
	BurstRequests   int
	BurstRefused    int
	Periods         int
	QuotaOffered    int64 // limit × periods
	Charged         int64 // what granted sessions used
	CoreRefused     int   // refused applies of CORE lines
	CoreCritRefused int   // of which critical
	RefusedByReason map[Reason]int
	// ExploreRefused counts refused applies of EXPLORE lines, of which
	// ExploreRefusedNonCritical were non-critical.
	ExploreRefused            int
	ExploreRefusedNonCritical int
	IdleQuota                 int64              // see IdlePct
	Ceiling                   int64              // see CeilingPct
	LineUtilisation           map[string]float64 // per line: charged / allotted, percent
	Events                    []Event
	// ReactionMs: for each burst, ms from its start to the first buffer
	// lent to its line (absent when none was), by kind of lending.
	ReactionMs map[string][]int64
}

// UtilisationPct is charged / offered quota.
func (r Result) UtilisationPct() float64 { return pct(r.Charged, r.QuotaOffered) }

// RefusedPct is the refused share of all applies.
func (r Result) RefusedPct() float64 { return pct(int64(r.Refused), int64(r.Requests)) }

// BurstRefusedPct is the refused share of applies during bursts (on the
// bursting lines).
func (r Result) BurstRefusedPct() float64 { return pct(int64(r.BurstRefused), int64(r.BurstRequests)) }

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) * 100 / float64(b)
}

// MeanReactionSeconds is the mean of ReactionMs[kind] in seconds, and how
// many bursts it covers.
func (r Result) MeanReactionSeconds(kind string) (float64, int) {
	v := r.ReactionMs[kind]
	if len(v) == 0 {
		return 0, 0
	}
	var s int64
	for _, x := range v {
		s += x
	}
	return float64(s) / float64(len(v)) / 1000, len(v)
}

// Simulate replays the workload through Model (and, for SchemeElastic, the
// Controller every TickMs) on a simulated clock: periods of cfg.PeriodMs
// each with cfg.Limit, every request applied at AtMs (session id "s<i>")
// and finished with Actual after DurationMs.
func Simulate(w Workload, cfg SimConfig) (Result, error) {
	if cfg.PeriodMs <= 0 || cfg.Limit <= 0 {
		return Result{}, fmt.Errorf("simulate: period and limit must be positive")
	}
	s := cfg.Settings
	specs := w.Lines
	if cfg.Scheme == SchemeStatic {
		s = Settings{DedicatedPercent: 100, Elasticity: ElasticityOff, ReclaimThresholdPercent: 100}
	}
	lay, err := Plan(cfg.Limit, s, specs)
	if err != nil {
		return Result{}, fmt.Errorf("simulate: %w", err)
	}
	m := NewModel(lay, cfg.Scheme == SchemeElastic)
	var ctl *Controller
	if cfg.Scheme == SchemeElastic {
		ctl = NewController(s, cfg.PeriodMs)
		// No operator releases buffer in a simulation: as in the service
		// (poolctl sets it each tick), buffer lent beyond what this
		// controller lent is adopted or returned.
		ctl.Released = map[string]int64{}
	}
	res := Result{Scheme: cfg.Scheme, RefusedByReason: map[Reason]int{}, ReactionMs: map[string][]int64{}}
	type fin struct {
		at   int64
		sid  string
		line string
		act  int64
	}
	bk := newBook(w, cfg.Limit, cfg.PeriodMs)
	var fins []fin // a min-heap would do; the slice stays short (sessions last seconds)
	tiers := map[string]Tier{}
	for _, l := range lay.Lines {
		tiers[l.Name] = l.Tier
	}
	period := int64(0)
	nextTick := int64(0)
	finishDue := func(t int64) {
		slices.SortFunc(fins, func(a, b fin) int { return int(a.at - b.at) })
		k := 0
		for ; k < len(fins) && fins[k].at <= t; k++ {
			if _, err := m.Finish(fins[k].sid, fins[k].act); err == nil {
				res.Charged += fins[k].act
				bk.charged[fins[k].line] += fins[k].act
			}
		}
		fins = fins[k:]
	}
	advance := func(t int64) {
		for {
			next := min(nextTick, (period+1)*cfg.PeriodMs)
			if next > t {
				break
			}
			finishDue(next)
			if next == (period+1)*cfg.PeriodMs {
				bk.closePeriod(m)
				period++
				m.NewPeriod(period)
			}
			if next == nextTick {
				if ctl != nil {
					res.Events = append(res.Events, ctl.Tick(m, next)...)
				}
				nextTick += TickMs
			}
		}
		finishDue(t)
	}
	last := int64(0)
	for i, r := range w.Requests {
		advance(r.AtMs)
		last = max(last, r.AtMs+r.DurationMs)
		sid := fmt.Sprintf("s%d", i)
		d, err := m.Apply(ApplyReq{SessionID: sid, Line: r.Line, Amount: r.Amount, Critical: r.Critical,
			Continuation: r.Continuation, Now: r.AtMs})
		if err != nil {
			return Result{}, fmt.Errorf("simulate: request %d: %w", i, err)
		}
		res.Requests++
		if r.Burst {
			res.BurstRequests++
		}
		if d.Reason != "" {
			res.Refused++
			res.RefusedByReason[d.Reason]++
			if r.Burst {
				res.BurstRefused++
			}
			bk.refused[r.Line] = true
			if tiers[r.Line] == TierExplore {
				res.ExploreRefused++
				if !r.Critical {
					res.ExploreRefusedNonCritical++
				}
			}
			if tiers[r.Line] == TierCore {
				res.CoreRefused++
				if r.Critical {
					res.CoreCritRefused++
				}
			}
			continue
		}
		fins = append(fins, fin{at: r.AtMs + r.DurationMs, sid: sid, line: r.Line, act: r.Actual})
	}
	end := (last/cfg.PeriodMs + 1) * cfg.PeriodMs
	advance(end - 1)
	finishDue(end)
	bk.closePeriod(m)
	res.Periods = int(end / cfg.PeriodMs)
	bk.finish(&res, res.Periods)
	res.QuotaOffered = cfg.Limit * int64(res.Periods)
	res.ReactionMs = reactions(w.Bursts, res.Events)
	return res, nil
}

// reactions finds, for each burst, the first buffer lent to its line at or
// after its start (within the burst), by kind.
func reactions(bursts []Burst, evs []Event) map[string][]int64 {
	out := map[string][]int64{}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].AtMs < evs[j].AtMs })
	for _, b := range bursts {
		for _, e := range evs {
			if e.Line == b.Line && e.AtMs >= b.StartMs && e.AtMs < b.EndMs && (e.Kind == "LEND_REACTIVE" || e.Kind == "LEND_PREDICTIVE") {
				out[e.Kind] = append(out[e.Kind], e.AtMs-b.StartMs)
				out["any"] = append(out["any"], e.AtMs-b.StartMs)
				break
			}
		}
	}
	return out
}
