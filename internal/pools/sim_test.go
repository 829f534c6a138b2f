package pools

import (
	"reflect"
	"testing"
)

// staggered: two lines whose demand alternates every period, each needing
// 60 % of the limit in its busy period and 10 % in its quiet one.
func staggered() Workload {
	w := Workload{Lines: []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}, {Name: "b", Tier: TierExplore, Weight: 1}}}
	for p := range int64(10) {
		for i := range int64(10) {
			busy, quiet := "a", "b"
			if p%2 == 1 {
				busy, quiet = "b", "a"
			}
			at := p*60_000 + i*5_000
			w.Requests = append(w.Requests,
				Request{AtMs: at, Line: busy, Amount: 60, Actual: 60, DurationMs: 1000, Critical: true},
				Request{AtMs: at + 1, Line: quiet, Amount: 10, Actual: 10, DurationMs: 1000, Critical: true})
		}
	}
	return w
}

func TestSimulatePoolsServeStaggeredDemandStaticRefuses(t *testing.T) {
	w := staggered()
	s := DefaultSettings()
	s.BorrowLimitPercent = 1000
	st, err := Simulate(w, SimConfig{Scheme: SchemeStatic, Limit: 1000, PeriodMs: 60_000, Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	po, err := Simulate(w, SimConfig{Scheme: SchemePools, Limit: 1000, PeriodMs: 60_000, Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	// Static: 500 each; the busy line's 600 per period loses 100 (two applies).
	if st.Refused != 20 || po.Refused != 0 {
		t.Fatalf("refused: static %d, pools %d; want 20, 0", st.Refused, po.Refused)
	}
	if po.UtilisationPct() <= st.UtilisationPct() || po.Charged != 7000 {
		t.Fatalf("utilisation static %.1f pools %.1f (charged %d)", st.UtilisationPct(), po.UtilisationPct(), po.Charged)
	}
}

func TestSimulateIsDeterministic(t *testing.T) {
	rows := make([]TraceRow, 3000)
	for i := range rows {
		rows[i] = TraceRow{AtMs: int64(i) * 400, Context: int64(100 + (i*7919)%3000), Generated: int64(i % 300)}
	}
	w1 := SplitTrace(rows, SplitOptions{BurstFactors: []float64{3, 4, 5}})
	w2 := SplitTrace(rows, SplitOptions{BurstFactors: []float64{3, 4, 5}})
	if !reflect.DeepEqual(w1, w2) {
		t.Fatal("SplitTrace is not deterministic")
	}
	if len(w1.Lines) != 12 || len(w1.Bursts) != 3 || len(w1.Requests) <= len(rows) {
		t.Fatalf("lines %d bursts %d requests %d", len(w1.Lines), len(w1.Bursts), len(w1.Requests))
	}
	tiers := map[Tier]int{}
	per := map[string]int{}
	for _, l := range w1.Lines {
		tiers[l.Tier]++
	}
	for _, r := range w1.Requests {
		per[r.Line]++
	}
	if tiers[TierCore] != 3 || tiers[TierGrowth] != 4 || tiers[TierExplore] != 5 || per["core-1"] <= per["explore-5"] {
		t.Fatalf("tiers %v, requests per line %v", tiers, per)
	}
	cfg := SimConfig{Scheme: SchemeElastic, Limit: 200_000, PeriodMs: 60_000, Settings: DefaultSettings()}
	r1, err := Simulate(w1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := Simulate(w1, cfg)
	if !reflect.DeepEqual(r1, r2) {
		t.Fatal("Simulate is not deterministic")
	}
	if r1.Requests != len(w1.Requests) || r1.BurstRequests == 0 {
		t.Fatalf("result %+v", r1)
	}
}
