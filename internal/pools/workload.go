package pools

import (
	"fmt"
	"math"
	"slices"
)

// TraceRow is one request of an LLM trace (qc-replay reads the CSV).
type TraceRow struct {
	AtMs      int64 // from the trace's first row
	Context   int64 // prompt tokens
	Generated int64 // completion tokens
}

// SplitOptions says how SplitTrace turns one trace into business lines.
type SplitOptions struct {
	Lines        int       // number of lines (default 12): a quarter CORE, a third GROWTH, the rest EXPLORE
	MaxTokens    int64     // reserved per request on top of the prompt (default 512)
	BurstFactors []float64 // one burst per factor (3 … 5 in seed 003), on lines of every tier in turn
	BurstMs      int64     // length of each burst (default 5 minutes)
	SwingPct     int64     // how much a line's share swings over time, percent (default 60)
	SwingMs      int64     // the swing's cycle (default 15 minutes)
	// EqualShares declares every line with the same weight (the fixed equal
	// shares a platform gives lines it has no demand figures for), while
	// demand still follows 100·0.85^k: static quotas and dedicated parts are
	// then not sized to each line's mean.
	EqualShares bool
	// Seed changes which line each row goes to (0: the shipped split), for
	// runs on line assignments the constants were not chosen on.
	Seed uint64
}

// splitHash is a 64-bit mix of (a, b) (splitmix64's finaliser): the
// deterministic coin of the split.
func splitHash(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e8f5
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func unit(a, b uint64) float64 { return float64(splitHash(a, b)>>11) / (1 << 53) }

// LineNames returns the lines of a split into n: weights 100·0.85^k
// (unequal sizes, largest first), tiers a quarter CORE, a third GROWTH, the
// rest EXPLORE (3 / 4 / 5 for 12), named core-1, growth-1, explore-1, ….
func LineNames(n int) []LineSpec {
	nc := max(1, n/4)
	ng := max(1, n/3)
	if nc+ng >= n {
		ng = max(0, n-nc-1)
	}
	specs := make([]LineSpec, n)
	c, g, e := 0, 0, 0
	for k := range n {
		w := max(1, int64(math.Round(100*math.Pow(0.85, float64(k)))))
		switch {
		case k < nc:
			c++
			specs[k] = LineSpec{Name: fmt.Sprintf("core-%d", c), Tier: TierCore, Weight: w}
		case k < nc+ng:
			g++
			specs[k] = LineSpec{Name: fmt.Sprintf("growth-%d", g), Tier: TierGrowth, Weight: w}
		default:
			e++
			specs[k] = LineSpec{Name: fmt.Sprintf("explore-%d", e), Tier: TierExplore, Weight: w}
		}
	}
	return specs
}

// SplitTrace assigns every row to a line and injects bursts. Deterministic:
// the same rows and options give the same workload.
//
//   - Row i goes to line k with probability ∝ weight_k·(1 + swing·sin(2πt/cycle
//   - 2πk/n)): unequal lines whose peaks are staggered in time, as seed 003
//     observes of real business lines.
//   - The apply asks for Context + MaxTokens and the finish reports Context +
//     Generated; a session lasts 1 s + 30 ms per generated token. One call in
//     ten is non-critical (preview, debug), one in four a continuation.
//   - Burst j hits line (j·5+1) mod n (so bursts fall on several tiers),
//     starting at (j+1)/(len+1) of the trace, for BurstMs: (Factor−1) × the
//     line's mean demand over the window is added as copies of its own
//     requests, evenly spaced. The line's requests in the window, its own and
//     the copies, are marked Burst.
func SplitTrace(rows []TraceRow, o SplitOptions) Workload {
	if o.Lines <= 0 {
		o.Lines = 12
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 512
	}
	if o.BurstMs <= 0 {
		o.BurstMs = 5 * 60_000
	}
	if o.SwingPct == 0 {
		o.SwingPct = 60
	}
	if o.SwingMs <= 0 {
		o.SwingMs = 15 * 60_000
	}
	specs := LineNames(o.Lines)
	n := len(specs)
	var span int64
	for _, r := range rows {
		span = max(span, r.AtMs)
	}
	w := Workload{Lines: specs}
	for j, f := range o.BurstFactors {
		k := (j*5 + 1) % n
		start := span * int64(j+1) / int64(len(o.BurstFactors)+1)
		w.Bursts = append(w.Bursts, Burst{Line: specs[k].Name, StartMs: start, EndMs: start + o.BurstMs, Factor: f})
	}
	weights := make([]float64, n)
	byLine := make([][]Request, n)
	for i, r := range rows {
		t := float64(r.AtMs) / float64(o.SwingMs) * 2 * math.Pi
		var sum float64
		for k, s := range specs {
			weights[k] = float64(s.Weight) * (1 + float64(o.SwingPct)/100*math.Sin(t+2*math.Pi*float64(k)/float64(n)))
			sum += weights[k]
		}
		u := unit(uint64(i)+o.Seed<<40, 1) * sum
		k := 0
		for ; k < n-1 && u >= weights[k]; k++ {
			u -= weights[k]
		}
		req := Request{AtMs: r.AtMs, Line: specs[k].Name, Amount: r.Context + o.MaxTokens, Actual: r.Context + r.Generated,
			DurationMs: 1000 + 30*r.Generated, Critical: unit(uint64(i)+o.Seed<<40, 2) >= 0.1, Continuation: unit(uint64(i)+o.Seed<<40, 3) < 0.25}
		for _, b := range w.Bursts {
			if b.Line == req.Line && r.AtMs >= b.StartMs && r.AtMs < b.EndMs {
				req.Burst = true
			}
		}
		w.Requests = append(w.Requests, req)
		byLine[k] = append(byLine[k], req)
	}
	// A burst of factor f adds (f−1) × the line's mean demand over the
	// window: copies of the line's own requests (taken in turn from the whole
	// trace), evenly spaced, so the line runs at about f times its normal rate
	// whatever the trace happened to do at that moment.
	for j, b := range w.Bursts {
		k := (j*5 + 1) % n
		src := byLine[k]
		if len(src) == 0 || span == 0 {
			continue
		}
		var total int64
		for _, r := range src {
			total += r.Actual
		}
		extra := int64((b.Factor - 1) * float64(total) * float64(b.EndMs-b.StartMs) / float64(span))
		var copies []Request
		for c, added := 0, int64(0); added < extra; c++ {
			cp := src[c%len(src)]
			cp.Critical = unit(uint64(j), uint64(100+c)) >= 0.1
			cp.Continuation = unit(uint64(j), uint64(1_000_000+c)) < 0.25
			cp.Burst = true
			copies = append(copies, cp)
			added += cp.Actual
		}
		for c := range copies {
			copies[c].AtMs = b.StartMs + (b.EndMs-b.StartMs)*int64(c)/int64(len(copies))
		}
		w.Requests = append(w.Requests, copies...)
	}
	if o.EqualShares {
		w.Lines = slices.Clone(specs)
		for k := range w.Lines {
			w.Lines[k].Weight = 100
		}
	}
	slices.SortStableFunc(w.Requests, func(a, b Request) int {
		switch {
		case a.AtMs < b.AtMs:
			return -1
		case a.AtMs > b.AtMs:
			return 1
		}
		return 0
	})
	return w
}

// Demand is the total Actual of the workload's requests.
func (w Workload) Demand() int64 {
	var s int64
	for _, r := range w.Requests {
		s += r.Actual
	}
	return s
}
