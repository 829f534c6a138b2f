package pools

import (
	"math"
	"testing"
)

// A run's percentages are shares of what was offered or asked; an empty run
// is 0 %, not a division by zero.
func TestSimResultFigures(t *testing.T) {
	r := Result{Requests: 8, Refused: 2, BurstRequests: 4, BurstRefused: 3, QuotaOffered: 1000, Charged: 250,
		IdleQuota: 100, Ceiling: 500, ExploreRefused: 4, ExploreRefusedNonCritical: 3,
		LineUtilisation: map[string]float64{"a": 20, "b": 95, "c": 50}, ReactionMs: map[string][]int64{"any": {1000, 3000}}}
	if r.CeilingPct() != 50 || r.UtilisationOfCeilingPct() != 50 || r.ExploreNonCriticalPct() != 75 {
		t.Fatalf("ceiling %.1f, of it %.1f, EXPLORE non-critical %.1f", r.CeilingPct(), r.UtilisationOfCeilingPct(), r.ExploreNonCriticalPct())
	}
	if lo, hi := r.LineUtilisationRange(); lo != 20 || hi != 95 {
		t.Fatalf("line utilisation %.0f … %.0f", lo, hi)
	}
	if r.UtilisationPct() != 25 || r.IdlePct() != 10 || r.RefusedPct() != 25 || r.BurstRefusedPct() != 75 {
		t.Fatalf("utilisation %.1f idle %.1f refused %.1f burst refused %.1f", r.UtilisationPct(), r.IdlePct(), r.RefusedPct(), r.BurstRefusedPct())
	}
	if s, n := r.MeanReactionSeconds("any"); s != 2 || n != 2 {
		t.Fatalf("mean reaction %.1f s over %d", s, n)
	}
	if s, n := r.MeanReactionSeconds("LEND_REACTIVE"); s != 0 || n != 0 {
		t.Fatalf("no reactions: %.1f s over %d", s, n)
	}
	var empty Result
	if empty.UtilisationPct() != 0 || empty.RefusedPct() != 0 || empty.IdlePct() != 0 || empty.ExploreNonCriticalPct() != 100 {
		t.Fatal("an empty run")
	}
}

// Each burst's reaction is the first lending to its line inside the burst.
func TestReactionsAreTheFirstLendingInsideEachBurst(t *testing.T) {
	bursts := []Burst{{Line: "a", StartMs: 1000, EndMs: 5000}, {Line: "b", StartMs: 2000, EndMs: 3000}}
	evs := []Event{
		{AtMs: 4000, Kind: "LEND_REACTIVE", Line: "a"},
		{AtMs: 900, Kind: "LEND_PREDICTIVE", Line: "a"}, // before the burst
		{AtMs: 1500, Kind: "RETURN", Line: "a"},         // not a lending
		{AtMs: 2500, Kind: "LEND_PREDICTIVE", Line: "a"},
		{AtMs: 3000, Kind: "LEND_REACTIVE", Line: "b"}, // at the burst's end: outside
		{AtMs: 2000, Kind: "LEND_REACTIVE", Line: "b"},
	}
	got := reactions(bursts, evs)
	if len(got["any"]) != 2 || got["any"][0] != 1500 || got["any"][1] != 0 ||
		len(got["LEND_PREDICTIVE"]) != 1 || len(got["LEND_REACTIVE"]) != 1 || got["LEND_REACTIVE"][0] != 0 {
		t.Fatalf("reactions %v", got)
	}
}

// Simulate needs a positive period and limit, and valid lines; it charges
// what the granted sessions used over whole periods.
func TestSimulateInputsAndTotals(t *testing.T) {
	w := staggered()
	for _, cfg := range []SimConfig{{Scheme: SchemePools, Limit: 0, PeriodMs: 60_000}, {Scheme: SchemePools, Limit: 1000, PeriodMs: 0}} {
		if _, err := Simulate(w, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	bad := w
	bad.Lines = []LineSpec{{Name: "a", Tier: "GOLD", Weight: 1}}
	if _, err := Simulate(bad, SimConfig{Scheme: SchemePools, Limit: 1000, PeriodMs: 60_000, Settings: DefaultSettings()}); err == nil {
		t.Fatal("bad lines accepted")
	}
	unknown := Workload{Lines: w.Lines, Requests: []Request{{Line: "zz", Amount: 1}}}
	if _, err := Simulate(unknown, SimConfig{Scheme: SchemePools, Limit: 1000, PeriodMs: 60_000, Settings: DefaultSettings()}); err == nil {
		t.Fatal("a request of an unknown line accepted")
	}
	r, err := Simulate(w, SimConfig{Scheme: SchemeElastic, Limit: 1000, PeriodMs: 60_000, Settings: DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	// 10 periods of 10 × (60 + 10) = 700 asked, at most 7000 charged; the
	// last request ends at 9·60 s + 45 s + 1 s, inside the tenth period.
	if r.Periods != 10 || r.QuotaOffered != 10_000 || r.Requests != 200 || r.Charged > 7000 || r.Charged <= 0 {
		t.Fatalf("%d periods, %d offered, %d requests, %d charged", r.Periods, r.QuotaOffered, r.Requests, r.Charged)
	}
	if r.Refused != sum(r.RefusedByReason) {
		t.Fatalf("refused %d, by reason %v", r.Refused, r.RefusedByReason)
	}
}

func sum(m map[Reason]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// The split: a quarter of the lines CORE, a third GROWTH, the rest
// EXPLORE, weights 100·0.85^k; with at least one of each above 2 lines.
func TestLineNamesTiersAndWeights(t *testing.T) {
	for n, want := range map[int][3]int{1: {1, 0, 0}, 2: {1, 0, 1}, 3: {1, 1, 1}, 4: {1, 1, 2}, 12: {3, 4, 5}, 13: {3, 4, 6}} {
		var got [3]int
		for _, s := range LineNames(n) {
			got[map[Tier]int{TierCore: 0, TierGrowth: 1, TierExplore: 2}[s.Tier]]++
		}
		if got != want {
			t.Errorf("%d lines: tiers %v, want %v", n, got, want)
		}
	}
	specs := LineNames(12)
	for k, s := range specs {
		if w := int64(math.Round(100 * math.Pow(0.85, float64(k)))); s.Weight != max(1, w) {
			t.Errorf("line %d weight %d, want %d", k, s.Weight, w)
		}
	}
	if specs[0].Name != "core-1" || specs[3].Name != "growth-1" || specs[7].Name != "explore-1" || specs[11].Name != "explore-5" {
		t.Fatalf("names %v", specs)
	}
}

// The split trace keeps every row's demand (apply = context + reserved
// tokens, finish = context + generated), sorts by arrival, and a burst of
// factor f adds about (f−1) × the line's mean demand over its window.
func TestSplitTraceDemandAndBursts(t *testing.T) {
	rows := make([]TraceRow, 2000)
	for i := range rows {
		rows[i] = TraceRow{AtMs: int64(i) * 600, Context: 100, Generated: 50}
	}
	plain := SplitTrace(rows, SplitOptions{Lines: 4, MaxTokens: 64})
	if len(plain.Requests) != len(rows) || len(plain.Bursts) != 0 || plain.Demand() != int64(len(rows))*150 {
		t.Fatalf("no bursts: %d requests, demand %d", len(plain.Requests), plain.Demand())
	}
	for i, r := range plain.Requests {
		if r.Amount != 164 || r.Actual != 150 || r.DurationMs != 1000+30*50 || r.Burst {
			t.Fatalf("request %d: %+v", i, r)
		}
		if i > 0 && r.AtMs < plain.Requests[i-1].AtMs {
			t.Fatal("requests not sorted by arrival")
		}
	}
	w := SplitTrace(rows, SplitOptions{Lines: 4, BurstFactors: []float64{3}, BurstMs: 60_000})
	b := w.Bursts[0]
	span := rows[len(rows)-1].AtMs
	if b.Line != LineNames(4)[1].Name || b.StartMs != span/2 || b.EndMs != b.StartMs+60_000 || b.Factor != 3 {
		t.Fatalf("burst %+v", b)
	}
	var lineTotal, inBurst int64
	for _, r := range plain.Requests {
		if r.Line == b.Line {
			lineTotal += r.Actual
		}
	}
	for _, r := range w.Requests {
		if r.Line == b.Line && r.AtMs >= b.StartMs && r.AtMs < b.EndMs {
			inBurst += r.Actual
			if !r.Burst {
				t.Fatalf("a request of the bursting line inside the burst is not marked: %+v", r)
			}
		}
	}
	extra := w.Demand() - plain.Demand()
	want := int64(2 * float64(lineTotal) * 60_000 / float64(span))
	if extra < want || extra > want+150 || inBurst < extra {
		t.Fatalf("burst added %d (in the window %d), want about %d", extra, inBurst, want)
	}
	// Defaults: 12 lines, 512 reserved tokens.
	d := SplitTrace(rows[:10], SplitOptions{})
	if len(d.Lines) != 12 || d.Requests[0].Amount != 612 {
		t.Fatalf("defaults: %d lines, amount %d", len(d.Lines), d.Requests[0].Amount)
	}
}
