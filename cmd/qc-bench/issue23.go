package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// writeIssue23Targets writes issue 23 §3's targets for the apply scenario
// at 50 connections, from this run's wrk runs (gs, keyed as writeWrk keys
// them):
//
//   - (a) quota-center's req/s ≥ 0.97× baseline+ledger's (the floor: one
//     auto-pipelined EVALSHA and a durable row), p99 ≤ 1.1× the floor's;
//   - (b) quota-center's own CPU per answer ≤ 0.8× envoyproxy/ratelimit's
//     own (µs of utime+stime per 2xx answer);
//   - (c) redis-server's CPU per quota-center answer ≤ 30 µs.
//
// Each verdict is on the medians over the reps, as the issue states them.
// (b) also gives the ratio of each rep's pair (quota-center's and
// ratelimit's runs of the same rep number, minutes apart), since the
// machine's slow minutes move both medians by more than the target's
// margin; (c) gives each rep's figure. A target whose runs are missing is
// "not measured"; nothing is written without quota-center's apply runs.
func writeIssue23Targets(p func(string, ...any), gs map[wrkKey][]WrkRun) {
	qc := gs[wrkKey{"apply", 50, LabelQC}]
	if len(qc) == 0 {
		return
	}
	floor, peer := gs[wrkKey{"apply", 50, LabelFloor}], gs[wrkKey{"apply", 50, LabelPeer}]
	p99 := func(r WrkRun) float64 { return r.Wrk.P99US / 1000 }
	own := func(label string) func(WrkRun) float64 { return func(r WrkRun) float64 { return r.usPerReq(label) } }
	redis := func(r WrkRun) float64 { return r.usPerReq("redis-server") }

	p("### Targets (issue 23 §3), as measured in this run (apply, 50 connections, medians)\n\n| target | measured | result |\n|---|---|---|\n")
	q, f := wrkMedian(qc, WrkRun.reqPS), wrkMedian(floor, WrkRun.reqPS)
	p("| (a) apply ≥ 0.97× baseline+ledger req/s | %s vs %s req/s = %s | %s |\n", f0(q), f0(f), ratio(q, f), passFail(q >= 0.97*f, !math.IsNaN(q) && !math.IsNaN(f)))
	q, f = wrkMedian(qc, p99), wrkMedian(floor, p99)
	p("| (a) apply p99 ≤ 1.1× baseline+ledger's | %s vs %s ms = %s | %s |\n", f2(q), f2(f), ratio(q, f), passFail(q <= 1.1*f, !math.IsNaN(q) && !math.IsNaN(f)))
	q, r := wrkMedian(qc, own(LabelQC)), wrkMedian(peer, own(LabelPeer))
	paired := pairedRatios(qc, peer, own(LabelQC), own(LabelPeer))
	pairs := "no rep of both"
	if len(paired) > 0 {
		pairs = fmt.Sprintf("per rep %s (median %s)", joinRatios(paired), fmtRatio(median(paired)))
	}
	p("| (b) quota-center's own CPU per apply ≤ 0.8× envoyproxy/ratelimit's own | %s vs %s µs = %s; %s | %s |\n",
		f0(q), f0(r), ratio(q, r), pairs, passFail(q <= 0.8*r, !math.IsNaN(q) && !math.IsNaN(r)))
	q = wrkMedian(qc, redis)
	var reps []string
	for _, run := range sortedByRep(qc) {
		reps = append(reps, fmt.Sprintf("%.1f", redis(run)))
	}
	p("| (c) Redis CPU per apply ≤ 30 µs | %s µs (per rep %s) | %s |\n\n", f0(q), strings.Join(reps, ", "), passFail(q <= 30, !math.IsNaN(q)))
}

// pairedRatios is a(x)/b(y) for each rep number that both runs have (x in
// as, y in bs), in rep order; pairs with a NaN or a zero denominator are
// left out.
func pairedRatios(as, bs []WrkRun, a, b func(WrkRun) float64) []float64 {
	byRep := map[int]WrkRun{}
	for _, y := range bs {
		byRep[y.Rep] = y
	}
	var out []float64
	for _, x := range sortedByRep(as) {
		y, ok := byRep[x.Rep]
		if !ok {
			continue
		}
		if n, d := a(x), b(y); !math.IsNaN(n) && !math.IsNaN(d) && d != 0 {
			out = append(out, n/d)
		}
	}
	return out
}

func sortedByRep(runs []WrkRun) []WrkRun {
	out := slices.Clone(runs)
	slices.SortStableFunc(out, func(x, y WrkRun) int { return x.Rep - y.Rep })
	return out
}

// median of v (NaN if empty); v is not changed.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRatio(v float64) string { return fmt.Sprintf("%.2f×", v) }

func joinRatios(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmtRatio(x)
	}
	return strings.Join(s, ", ")
}
