package main

import (
	"math"
	"slices"
	"sort"
	"strings"
)

// Labels of the wrk runs (scripts/bench.sh): the two servers of the
// interleaved runs, and envoyproxy/ratelimit when QC_BENCH_PEER_RATELIMIT
// names its binary.
const LabelPeer = "envoy-ratelimit"

// LabelFloor is qc-baseline with a ledger (--mysql-dsn,
// scripts/bench-floor.sh): one EVALSHA, auto-pipelined through
// quota-center's Redis path, and the session's durable ledger row through
// quota-center's group commit, the floor of a durable apply.
const LabelFloor = "baseline+ledger"

// LabelQCPlain is quota-center in the pools scenario on the resource
// without lines (the comparison of issue 13 §8).
const LabelQCPlain = "quota-center-plain"

// WrkRun is one line of the wrk results file scripts/bench.sh writes: one
// measured wrk run and the CPU each process used during it.
type WrkRun struct {
	Scenario    string `json:"scenario"` // apply, session, heartbeat
	Connections int    `json:"connections"`
	Server      string `json:"server"` // LabelBaseline, LabelFloor, LabelQC, LabelPeer, LabelQCPlain
	Rep         int    `json:"rep"`
	// Wrk is the QCWRK line of scripts/wrk/common.lua.
	Wrk struct {
		DurationUS   float64 `json:"duration_us"`
		Requests     int64   `json:"requests"`
		Non2xx       int64   `json:"non2xx"`
		SocketErrors int64   `json:"socket_errors"`
		P50US        float64 `json:"p50_us"`
		P90US        float64 `json:"p90_us"`
		P99US        float64 `json:"p99_us"`
		Finished     int64   `json:"finished"` // session scenario: finishes answered 200
	} `json:"wrk"`
	// CPUSeconds is utime+stime of each watched process over the measured
	// run (the server under test, redis-server, mariadbd, wrk).
	CPUSeconds map[string]float64 `json:"cpu_s"`
	// MachineBusySeconds is the busy CPU time of the whole machine (all
	// cores, /proc/stat minus idle and iowait) over the run.
	MachineBusySeconds float64 `json:"machine_busy_s"`
}

func (r WrkRun) seconds() float64 { return r.Wrk.DurationUS / 1e6 }

// ok is the answers that were 2xx.
func (r WrkRun) ok() float64 { return float64(r.Wrk.Requests - r.Wrk.Non2xx) }

func (r WrkRun) reqPS() float64 { return r.ok() / r.seconds() }

func (r WrkRun) sessPS() float64 {
	switch r.Scenario {
	case "apply":
		return r.reqPS()
	case "session":
		return float64(r.Wrk.Finished) / r.seconds()
	}
	return math.NaN()
}

// usPerReq is the CPU of process name per 2xx answer, in microseconds.
func (r WrkRun) usPerReq(name string) float64 {
	s, ok := r.CPUSeconds[name]
	if !ok || r.ok() == 0 {
		return math.NaN()
	}
	return s * 1e6 / r.ok()
}

func readWrkRuns(path string) ([]WrkRun, error) { return readJSONLines[WrkRun](path) }

type wrkKey struct {
	scen   string
	conns  int
	server string
}

// median of f over runs (NaN values left out; NaN if none is left).
func wrkMedian(runs []WrkRun, f func(WrkRun) float64) float64 {
	var v []float64
	for _, r := range runs {
		if x := f(r); !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

var wrkScenarioTitle = map[string]string{
	"apply":     "apply alone: every request a new session",
	"session":   "apply → finish: a finish only after its apply's 200 was read",
	"heartbeat": "heartbeat on 1,000 open sessions",
	"pools":     "apply alone on a resource with 12 business lines, and the same on a plain resource (quota-center-plain)",
}

// The CPU columns, per request: the server under test, then the shared
// backends and the load generator.
var wrkCPUColumns = []string{"itself", "redis-server", "mariadbd", "wrk"}

// writeWrk writes the wrk section: issue 11's targets, then each
// scenario's throughput, latency and CPU per request.
func writeWrk(p func(string, ...any), runs []WrkRun, in reportInput) {
	gs := map[wrkKey][]WrkRun{}
	var scens []string
	var conns []int
	for _, r := range runs {
		k := wrkKey{r.Scenario, r.Connections, r.Server}
		gs[k] = append(gs[k], r)
		if !slices.Contains(scens, r.Scenario) {
			scens = append(scens, r.Scenario)
		}
		if !slices.Contains(conns, r.Connections) {
			conns = append(conns, r.Connections)
		}
	}
	slices.Sort(conns)
	med := func(s string, c int, server string, f func(WrkRun) float64) float64 {
		return wrkMedian(gs[wrkKey{s, c, server}], f)
	}
	servers := func(s string, c int) []string {
		var out []string
		for _, l := range []string{LabelBaseline, LabelFloor, LabelPeer, LabelQCPlain, LabelQC} {
			if len(gs[wrkKey{s, c, l}]) > 0 {
				out = append(out, l)
			}
		}
		return out
	}

	p("## Headline figures (wrk; issue 11)\n\n")
	for _, line := range in.metaAll("wrkhow") {
		p("- %s\n", line)
	}
	if len(in.results) == 0 { // else the qc-bench section lists them
		for _, line := range in.metaAll("note") {
			p("- %s\n", line)
		}
		if cmds := in.metaAll("command"); len(cmds) > 0 {
			p("\nCommands:\n\n```sh\n%s\n```\n", strings.Join(cmds, "\n"))
		}
	}
	p("\n### Targets (issue 11, §1), as measured in this run (50 connections, medians)\n\n| target | measured | result |\n|---|---|---|\n")
	qc := func(s string, f func(WrkRun) float64) float64 { return med(s, 50, LabelQC, f) }
	apply := qc("apply", WrkRun.reqPS)
	if peer := med("apply", 50, LabelPeer, WrkRun.reqPS); !math.IsNaN(peer) {
		p("| apply ≥ 1.0× envoyproxy/ratelimit req/s | %s vs %s req/s = %s | %s |\n", f0(apply), f0(peer), ratio(apply, peer), passFail(apply >= peer, !math.IsNaN(apply)))
	} else {
		p("| apply ≥ 1.0× envoyproxy/ratelimit req/s | not measured (set QC_BENCH_PEER_RATELIMIT) | – |\n")
	}
	writeFloorTarget(p, func(scen, server string, f func(WrkRun) float64) float64 { return med(scen, 50, server, f) })
	base := med("apply", 50, LabelBaseline, WrkRun.reqPS)
	p("| apply ≥ 0.6× the one-EVALSHA baseline req/s | %s vs %s req/s = %s | %s |\n", f0(apply), f0(base), ratio(apply, base), passFail(apply >= 0.6*base, !math.IsNaN(apply) && !math.IsNaN(base)))
	p99 := qc("apply", func(r WrkRun) float64 { return r.Wrk.P99US / 1000 })
	p("| apply p99 ≤ 5 ms | %s ms | %s |\n", f2(p99), passFail(p99 <= 5, !math.IsNaN(p99)))
	sess := qc("session", WrkRun.sessPS)
	p("| apply → finish ≥ 8,000 sessions/s | %s sessions/s | %s |\n", f0(sess), passFail(sess >= 8000, !math.IsNaN(sess)))
	writePoolsTarget(p, func(server string, f func(WrkRun) float64) float64 { return med("pools", 50, server, f) })
	p("\n")
	writeIssue23Targets(p, gs)

	for _, s := range scens {
		p("### %s (`%s`)\n\n", or(wrkScenarioTitle[s], s), s)
		p("| connections | server | req/s | sessions/s | p50 ms | p90 ms | p99 ms | vs baseline | vs ratelimit | req/s of each rep | non-2xx |\n")
		p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
		for _, c := range conns {
			b := med(s, c, LabelBaseline, WrkRun.reqPS)
			peer := med(s, c, LabelPeer, WrkRun.reqPS)
			for _, l := range servers(s, c) {
				g := gs[wrkKey{s, c, l}]
				var reps []string
				var bad int64
				for _, r := range g {
					reps = append(reps, f0(r.reqPS()))
					bad += r.Wrk.Non2xx + r.Wrk.SocketErrors
				}
				rps := wrkMedian(g, WrkRun.reqPS)
				vsPeer := "–"
				if !math.IsNaN(peer) {
					vsPeer = ratio(rps, peer)
				}
				p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", c, l, f0(rps), f0(wrkMedian(g, WrkRun.sessPS)),
					f2(wrkMedian(g, func(r WrkRun) float64 { return r.Wrk.P50US / 1000 })),
					f2(wrkMedian(g, func(r WrkRun) float64 { return r.Wrk.P90US / 1000 })),
					f2(wrkMedian(g, func(r WrkRun) float64 { return r.Wrk.P99US / 1000 })),
					ratio(rps, b), vsPeer, strings.Join(reps, ", "), bad)
			}
		}
		p("\nCPU per 2xx answer, in µs (median over the reps; \"itself\" is the server under test; \"machine\" is the busy CPU of the whole machine per answer, other work included):\n\n")
		p("| connections | server | %s | sum | machine |\n|---:|---|%s---:|---:|\n", strings.Join(wrkCPUColumns, " | "), strings.Repeat("---:|", len(wrkCPUColumns)))
		for _, c := range conns {
			for _, l := range servers(s, c) {
				g := gs[wrkKey{s, c, l}]
				var cols []string
				sum := 0.0
				for _, name := range wrkCPUColumns {
					proc := name
					if name == "itself" {
						proc = l
					}
					v := wrkMedian(g, func(r WrkRun) float64 { return r.usPerReq(proc) })
					if !math.IsNaN(v) {
						sum += v
					}
					cols = append(cols, f0(v))
				}
				machine := wrkMedian(g, func(r WrkRun) float64 {
					if r.ok() == 0 {
						return math.NaN()
					}
					return r.MachineBusySeconds * 1e6 / r.ok()
				})
				p("| %d | %s | %s | %s | %s |\n", c, l, strings.Join(cols, " | "), f0(sum), f0(machine))
			}
		}
		p("\n")
	}
}

// writePoolsTarget writes issue 13 §8's target: an apply on a resource with
// 12 business lines costs at most 1.2× a plain apply, in latency (p50, p99)
// and in quota-center's CPU per answer, both measured in the pools scenario
// of the same run (interleaved).
func writePoolsTarget(p func(string, ...any), med func(server string, f func(WrkRun) float64) float64) {
	for _, m := range []struct {
		name string
		f    func(WrkRun) float64
	}{
		{"p50", func(r WrkRun) float64 { return r.Wrk.P50US / 1000 }},
		{"p99", func(r WrkRun) float64 { return r.Wrk.P99US / 1000 }},
	} {
		lines, plain := med(LabelQC, m.f), med(LabelQCPlain, m.f)
		if math.IsNaN(lines) || math.IsNaN(plain) {
			p("| apply on 12 lines ≤ 1.2× a plain apply, %s (issue 13 §8) | not measured (QC_BENCH_WRK_SCENARIOS without pools) | – |\n", m.name)
			continue
		}
		p("| apply on 12 lines ≤ 1.2× a plain apply, %s (issue 13 §8) | %s vs %s ms = %s | %s |\n", m.name, f2(lines), f2(plain), ratio(lines, plain), passFail(lines <= 1.2*plain, true))
	}
	cpu := func(server string) float64 {
		return med(server, func(r WrkRun) float64 { return r.usPerReq(r.Server) })
	}
	lines, plain := cpu(LabelQC), cpu(LabelQCPlain)
	if math.IsNaN(lines) || math.IsNaN(plain) {
		return
	}
	p("| apply on 12 lines ≤ 1.2× a plain apply, quota-center CPU per answer (issue 13 §8) | %s vs %s µs = %s | %s |\n", f0(lines), f0(plain), ratio(lines, plain), passFail(lines <= 1.2*plain, true))
}

// writeFloorTarget states the floor of issue 11 §1's first target, measured
// in the same run: what baseline+ledger (one EVALSHA through quota-center's
// auto-pipelined Redis path and a durable ledger row through quota-center's
// group commit, nothing else) does against envoyproxy/ratelimit's req/s in
// the apply scenario, and against 8,000 sessions/s in the session scenario;
// the result column gives quota-center's figure as a share of the floor's.
// Nothing is written when baseline+ledger did not run.
func writeFloorTarget(p func(string, ...any), med func(scen, server string, f func(WrkRun) float64) float64) {
	floor := med("apply", LabelFloor, WrkRun.reqPS)
	if math.IsNaN(floor) {
		return
	}
	qc := med("apply", LabelQC, WrkRun.reqPS)
	if peer := med("apply", LabelPeer, WrkRun.reqPS); !math.IsNaN(peer) {
		p("| floor of the first target: baseline+ledger (one auto-pipelined EVALSHA + the durable row, nothing else) vs envoyproxy/ratelimit req/s | %s vs %s req/s = %s | quota-center at %s of the floor |\n",
			f0(floor), f0(peer), ratio(floor, peer), ratio(qc, floor))
	} else {
		p("| floor of the first target: baseline+ledger (one auto-pipelined EVALSHA + the durable row, nothing else) req/s | %s req/s (envoyproxy/ratelimit not measured) | quota-center at %s of the floor |\n",
			f0(floor), ratio(qc, floor))
	}
	if sess := med("session", LabelFloor, WrkRun.sessPS); !math.IsNaN(sess) {
		p("| floor of apply → finish: baseline+ledger sessions/s (durable row and its settling update) | %s sessions/s = %s of 8,000 | quota-center at %s of the floor |\n",
			f0(sess), ratio(sess, 8000), ratio(med("session", LabelQC, WrkRun.sessPS), sess))
	}
}
