package pools

import (
	"math"
	"sort"
	"testing"
)

// The split's coin is splitmix64's finaliser of a·γ + b + C (γ the golden
// gamma 0x9e3779b97f4a7c15, C = 0x632be59bd9b4e8f5): with b = −C it is
// splitmix64 itself, whose first outputs from seed 0 are published
// (Vigna, prng.di.unimi.it/splitmix64.c).
func TestSplitHashIsSplitmix64(t *testing.T) {
	c := uint64(0x632be59bd9b4e8f5)
	for a, want := range map[uint64]uint64{1: 0xe220a8397b1dcdaf, 2: 0x6e789e6aa1b965f4, 3: 0x06c45d188009454f} {
		if got := splitHash(a, -c); got != want {
			t.Errorf("splitHash(%d, −C) = %#x, want splitmix64's output %#x", a, got, want)
		}
	}
	// b shifts the state: (a, b+γ) is (a+1, b).
	if splitHash(0, uint64(0x9e3779b97f4a7c15)-c) != 0xe220a8397b1dcdaf {
		t.Error("b is not added to the state")
	}
	// unit is a uniform coin on [0, 1).
	var sum float64
	const n = 100_000
	for i := range uint64(n) {
		u := unit(i, 7)
		if u < 0 || u >= 1 {
			t.Fatalf("unit(%d, 7) = %v, outside [0, 1)", i, u)
		}
		sum += u
	}
	if mean := sum / n; math.Abs(mean-0.5) > 0.01 {
		t.Fatalf("mean of %d coins %.4f, want 0.5", n, mean)
	}
}

// shares counts the requests of each line among those at atMs.
func shares(w Workload, atMs int64) (map[string]float64, int) {
	n := map[string]int{}
	total := 0
	for _, r := range w.Requests {
		if r.AtMs == atMs {
			n[r.Line]++
			total++
		}
	}
	out := map[string]float64{}
	for l, k := range n {
		out[l] = float64(k) / float64(total)
	}
	return out, total
}

// Row i goes to line k with probability ∝ weight_k·(1 + swing·sin(2πt/cycle
// + 2πk/n)) (SplitTrace's docstring; docs/pools.md §3): the shares of many
// rows arriving at one instant follow that formula, with the default swing
// (60 %, 15 minutes) and with options of one's own.
func TestSplitSharesFollowTheSwing(t *testing.T) {
	const perInstant = 20_000
	for _, c := range []struct {
		name       string
		opt        SplitOptions
		swing      float64
		cycleMs    int64
		instantsMs []int64
	}{
		{"defaults", SplitOptions{Lines: 4}, 0.6, 15 * 60_000, []int64{0, 15 * 60_000 / 4, 15 * 60_000 * 3 / 8}},
		{"swing 30 % over a minute", SplitOptions{Lines: 4, SwingPct: 30, SwingMs: 60_000}, 0.3, 60_000, []int64{0, 15_000, 40_000}},
	} {
		var rows []TraceRow
		for _, at := range c.instantsMs {
			for range perInstant {
				rows = append(rows, TraceRow{AtMs: at, Context: 10, Generated: 1})
			}
		}
		w := SplitTrace(rows, c.opt)
		specs := LineNames(4)
		for _, at := range c.instantsMs {
			got, total := shares(w, at)
			if total != perInstant {
				t.Fatalf("%s: %d requests at %d ms, want %d", c.name, total, at, perInstant)
			}
			want := make([]float64, len(specs))
			var sum float64
			for k, s := range specs {
				want[k] = float64(s.Weight) * (1 + c.swing*math.Sin(2*math.Pi*float64(at)/float64(c.cycleMs)+2*math.Pi*float64(k)/float64(len(specs))))
				sum += want[k]
			}
			for k, s := range specs {
				// 20 000 draws: a share's standard error is under 0.0035.
				if p := want[k] / sum; math.Abs(got[s.Name]-p) > 0.015 {
					t.Errorf("%s: at %d ms %s has %.3f of the rows, want %.3f", c.name, at, s.Name, got[s.Name], p)
				}
			}
		}
	}
}

// One call in ten is non-critical, one in four a continuation, the two
// coins independent; the same holds for a burst's copies.
func TestSplitCriticalAndContinuationShares(t *testing.T) {
	rows := make([]TraceRow, 20_000)
	for i := range rows {
		rows[i] = TraceRow{AtMs: int64(i) * 100, Context: 100, Generated: 50}
	}
	w := SplitTrace(rows, SplitOptions{Lines: 4, BurstFactors: []float64{9}, BurstMs: 1_000_000})
	plain := SplitTrace(rows, SplitOptions{Lines: 4})
	for _, c := range []struct {
		name string
		reqs []Request
	}{{"rows", plain.Requests}, {"copies", copiesOf(w, plain)}} {
		var nonCrit, cont, both int
		for _, r := range c.reqs {
			if !r.Critical {
				nonCrit++
			}
			if r.Continuation {
				cont++
			}
			if !r.Critical && r.Continuation {
				both++
			}
		}
		n := float64(len(c.reqs))
		if n < 2000 {
			t.Fatalf("%s: only %d", c.name, len(c.reqs))
		}
		if f := float64(nonCrit) / n; math.Abs(f-0.10) > 0.02 {
			t.Errorf("%s: %.3f non-critical, want 0.10", c.name, f)
		}
		if f := float64(cont) / n; math.Abs(f-0.25) > 0.03 {
			t.Errorf("%s: %.3f continuations, want 0.25", c.name, f)
		}
		if f := float64(both) / n; math.Abs(f-0.025) > 0.01 {
			t.Errorf("%s: %.3f both, want 0.025 (independent coins)", c.name, f)
		}
	}
}

// reqKey is a request without the flags a burst sets or draws anew.
type reqKey struct {
	at, amount, actual, dur int64
	line                    string
}

// copiesOf returns the requests of w that are not rows of plain (the same
// rows split without bursts): the burst's copies.
func copiesOf(w, plain Workload) []Request {
	left := map[reqKey]int{}
	for _, r := range plain.Requests {
		left[reqKey{r.AtMs, r.Amount, r.Actual, r.DurationMs, r.Line}]++
	}
	var out []Request
	for _, r := range w.Requests {
		k := reqKey{r.AtMs, r.Amount, r.Actual, r.DurationMs, r.Line}
		if left[k] > 0 {
			left[k]--
			continue
		}
		out = append(out, r)
	}
	return out
}

// Burst j falls on line (5j+1) mod n starting at (j+1)/(bursts+1) of the
// trace and lasts 5 minutes by default: with 12 lines and factors 3, 4, 5,
// core-2, growth-4 and explore-5 at ¼, ½ and ¾ (docs/pools.md §3).
func TestSplitBurstsFallWhereTheDocSays(t *testing.T) {
	rows := make([]TraceRow, 4001)
	for i := range rows {
		rows[i] = TraceRow{AtMs: int64(i) * 1000, Context: 100, Generated: 10}
	}
	w := SplitTrace(rows, SplitOptions{BurstFactors: []float64{3, 4, 5}})
	want := []Burst{
		{Line: "core-2", StartMs: 1_000_000, EndMs: 1_300_000, Factor: 3},
		{Line: "growth-4", StartMs: 2_000_000, EndMs: 2_300_000, Factor: 4},
		{Line: "explore-5", StartMs: 3_000_000, EndMs: 3_300_000, Factor: 5},
	}
	if len(w.Bursts) != 3 {
		t.Fatalf("bursts %v", w.Bursts)
	}
	for j := range want {
		if w.Bursts[j] != want[j] {
			t.Errorf("burst %d: %+v, want %+v", j, w.Bursts[j], want[j])
		}
	}
	// Each burst adds copies of its own line only, inside its window.
	plain := SplitTrace(rows, SplitOptions{})
	for _, cp := range copiesOf(w, plain) {
		in := false
		for _, b := range w.Bursts {
			in = in || (cp.Line == b.Line && cp.AtMs >= b.StartMs && cp.AtMs < b.EndMs)
		}
		if !in || !cp.Burst {
			t.Fatalf("copy %+v outside its line's burst", cp)
		}
	}
}

// A burst of factor f adds copies of the line's own requests, taken in
// turn from the whole trace, until they add up to (f−1) × the line's mean
// demand over the window (the fewest that reach it), evenly spaced over
// the window; every request of the line inside the window — start
// inclusive, end exclusive — is marked Burst, and no other.
func TestSplitBurstCopiesAndMarks(t *testing.T) {
	var rows []TraceRow
	for i := range int64(1001) { // 8 rows every second: several of each line at each instant
		for k := range int64(8) {
			rows = append(rows, TraceRow{AtMs: i * 1000, Context: 100 + (i*8+k)%50, Generated: 50 - (i*8+k)%50})
		}
	}
	span := int64(1_000_000)
	plain := SplitTrace(rows, SplitOptions{Lines: 4})
	line := LineNames(4)[1].Name
	var own []Request
	var total int64
	for _, r := range plain.Requests {
		if r.Line == line {
			own = append(own, r)
			total += r.Actual // 150 each
		}
	}
	// Factor 3 over a window as long as the trace: (3−1) × total, exactly
	// two passes over the line's requests.
	w := SplitTrace(rows, SplitOptions{Lines: 4, BurstFactors: []float64{3}, BurstMs: span})
	b := w.Bursts[0]
	for i := 1; i < len(w.Requests); i++ {
		if w.Requests[i].AtMs < w.Requests[i-1].AtMs {
			t.Fatalf("with a burst, request %d at %d ms comes after one at %d ms", i, w.Requests[i].AtMs, w.Requests[i-1].AtMs)
		}
	}
	cps := copiesOf(w, plain)
	if len(cps) != 2*len(own) {
		t.Fatalf("%d copies of %d requests (total %d), want two passes: %d", len(cps), len(own), total, 2*len(own))
	}
	amounts := map[int64]int{}
	for _, r := range own {
		amounts[r.Amount] += 2
	}
	for _, cp := range cps {
		amounts[cp.Amount]--
	}
	for a, n := range amounts {
		if n != 0 {
			t.Fatalf("amount %d copied %d times too few", a, n)
		}
	}
	// Evenly spaced: the first at the start, gaps of ⌊L/N⌋ or ⌈L/N⌉, all inside.
	ats := make([]int64, len(cps))
	for i, cp := range cps {
		ats[i] = cp.AtMs
	}
	sort.Slice(ats, func(i, j int) bool { return ats[i] < ats[j] })
	gap := float64(b.EndMs-b.StartMs) / float64(len(cps))
	if ats[0] != b.StartMs || ats[len(ats)-1] >= b.EndMs {
		t.Fatalf("copies from %d to %d, window [%d, %d)", ats[0], ats[len(ats)-1], b.StartMs, b.EndMs)
	}
	for i := 1; i < len(ats); i++ {
		if d := float64(ats[i] - ats[i-1]); d < math.Floor(gap) || d > math.Ceil(gap) {
			t.Fatalf("gap %v between copies %d and %d, want %.2f", d, i-1, i, gap)
		}
	}

	// The fewest copies that reach the extra demand: with factor 1.5 over
	// the whole trace, extra = total/2 (a multiple of 150 when the line has
	// an even number of requests, else 75 short of one).
	w = SplitTrace(rows, SplitOptions{Lines: 4, BurstFactors: []float64{1.5}, BurstMs: span})
	extra := int64(0.5 * float64(total))
	if got, want := len(copiesOf(w, plain)), int((extra+149)/150); got != want {
		t.Fatalf("%d copies for an extra demand of %d, want %d", got, extra, want)
	}
	w = SplitTrace(rows, SplitOptions{Lines: 4, BurstFactors: []float64{2}, BurstMs: span})
	if got := len(copiesOf(w, plain)); got != len(own) {
		t.Fatalf("%d copies for an extra demand of exactly %d, want %d", got, total, len(own))
	}

	// Marks, on a window of 100 s at the middle: [500 s, 600 s).
	w = SplitTrace(rows, SplitOptions{Lines: 4, BurstFactors: []float64{3}, BurstMs: 100_000})
	b = w.Bursts[0]
	if b.StartMs != 500_000 || b.EndMs != 600_000 {
		t.Fatalf("burst %+v", b)
	}
	atStart, atEnd := 0, 0
	for _, r := range w.Requests {
		inside := r.Line == b.Line && r.AtMs >= b.StartMs && r.AtMs < b.EndMs
		if r.Burst != inside {
			t.Fatalf("request %+v marked %v, inside the burst %v", r, r.Burst, inside)
		}
		if r.Line == b.Line && r.AtMs == b.StartMs {
			atStart++
		}
		if r.Line == b.Line && r.AtMs == b.EndMs {
			atEnd++
		}
	}
	if atStart == 0 || atEnd == 0 {
		t.Fatalf("the test needs requests of %s at both edges: %d at the start, %d at the end", b.Line, atStart, atEnd)
	}
}

// Requests are sorted by arrival; those arriving together keep the trace's
// order (the sort is stable), the copies after the rows.
func TestSplitKeepsTheTraceOrderAtEqualTimes(t *testing.T) {
	var rows []TraceRow
	for i := range int64(200) {
		for k := range int64(5) {
			rows = append(rows, TraceRow{AtMs: i * 1000, Context: i*5 + k, Generated: 1})
		}
	}
	w := SplitTrace(rows, SplitOptions{Lines: 3})
	for i := 1; i < len(w.Requests); i++ {
		a, b := w.Requests[i-1], w.Requests[i]
		if b.AtMs < a.AtMs || (b.AtMs == a.AtMs && b.Amount < a.Amount) {
			t.Fatalf("request %d (%+v) before %d (%+v)", i-1, a, i, b)
		}
	}
}

// EqualShares declares every line with the same weight and leaves demand as
// it was; another Seed sends rows to other lines (the same rows, the same
// total demand).
func TestSplitEqualSharesAndSeed(t *testing.T) {
	rows := make([]TraceRow, 3000)
	for i := range rows {
		rows[i] = TraceRow{AtMs: int64(i) * 1000, Context: int64(100 + i%50), Generated: 10}
	}
	plain := SplitTrace(rows, SplitOptions{})
	eq := SplitTrace(rows, SplitOptions{EqualShares: true})
	for k, l := range eq.Lines {
		if l.Weight != 100 || l.Name != plain.Lines[k].Name || l.Tier != plain.Lines[k].Tier {
			t.Fatalf("line %d: %+v, plain %+v", k, l, plain.Lines[k])
		}
	}
	if plain.Lines[11].Weight == 100 {
		t.Fatal("EqualShares changed the plain split's lines")
	}
	for i := range plain.Requests {
		if plain.Requests[i] != eq.Requests[i] {
			t.Fatalf("request %d: %+v, with equal shares %+v", i, plain.Requests[i], eq.Requests[i])
		}
	}
	other := SplitTrace(rows, SplitOptions{Seed: 1})
	moved := 0
	for i := range plain.Requests {
		if plain.Requests[i].Line != other.Requests[i].Line {
			moved++
		}
	}
	if moved < len(rows)/2 || other.Demand() != plain.Demand() {
		t.Fatalf("seed 1 moved %d of %d rows; demand %d vs %d", moved, len(rows), other.Demand(), plain.Demand())
	}
}
