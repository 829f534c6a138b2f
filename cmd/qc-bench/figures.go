package main

// The figures of a report: repetitions grouped by scenario × connections ×
// server, their medians, the CPU split, the targets' verdicts and the
// memory growth check.

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// group is the repetitions of one scenario × connections × server.
type group struct {
	runs []Result
}

func (g *group) med(f func(Result) float64) float64 {
	if g == nil || len(g.runs) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(g.runs))
	for i, r := range g.runs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func (g *group) max(f func(Result) float64) float64 {
	m := math.NaN()
	if g == nil {
		return m
	}
	for _, r := range g.runs {
		if v := f(r); math.IsNaN(m) || v > m {
			m = v
		}
	}
	return m
}

func (g *group) sum(f func(Result) uint64) uint64 {
	var s uint64
	if g != nil {
		for _, r := range g.runs {
			s += f(r)
		}
	}
	return s
}

type groupKey struct {
	scenario string
	conns    int
	label    string
}

func groupResults(rs []Result) (map[groupKey]*group, []string, []int) {
	gs := map[groupKey]*group{}
	seenS, seenC := map[string]bool{}, map[int]bool{}
	var scen []string
	var conns []int
	for _, r := range rs {
		k := groupKey{r.Scenario, r.Connections, r.Label}
		if gs[k] == nil {
			gs[k] = &group{}
		}
		gs[k].runs = append(gs[k].runs, r)
		if !seenS[r.Scenario] {
			seenS[r.Scenario] = true
			scen = append(scen, r.Scenario)
		}
		if !seenC[r.Connections] {
			seenC[r.Connections] = true
			conns = append(conns, r.Connections)
		}
	}
	order := map[string]int{}
	for i, s := range Scenarios {
		order[s] = i
	}
	sort.SliceStable(scen, func(i, j int) bool { return order[scen[i]] < order[scen[j]] })
	sort.Ints(conns)
	return gs, scen, conns
}

func f0(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return withCommas(int64(math.Round(v)))
}

func f2(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func withCommas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

var scenarioTitle = map[string]string{
	ScenarioApply:            "apply alone",
	ScenarioSession:          "apply → finish",
	ScenarioHeartbeatSession: "apply → heartbeat ×2 → finish",
	ScenarioHeartbeat:        "heartbeat alone (on 1,000 open sessions)",
}

func reqPS(r Result) float64  { return r.ReqPerS }
func sessPS(r Result) float64 { return r.SessionsPS }
func p50(r Result) float64    { return r.Latency.P50 }
func p90(r Result) float64    { return r.Latency.P90 }
func p99(r Result) float64    { return r.Latency.P99 }
func busy(r Result) float64   { return r.MachineBusy }

// other is the machine's busy CPU that none of the watched processes used
// (other work on the machine, the kernel's share not charged to a process).
func other(r Result) float64 {
	v := r.MachineBusy
	for _, c := range r.CPU {
		v -= c
	}
	return math.Max(v, 0)
}
func cpuOf(name string) func(Result) float64 {
	return func(r Result) float64 {
		if v, ok := r.CPU[name]; ok {
			return v
		}
		return math.NaN()
	}
}
func stepP(step string, q func(Lat) float64) func(Result) float64 {
	return func(r Result) float64 {
		if l, ok := r.Steps[step]; ok {
			return q(l)
		}
		return math.NaN()
	}
}

// limits says what bounds a group's figure, from its median CPU split.
func limits(g *group) string {
	if g == nil || len(g.runs) == 0 {
		return ""
	}
	n := float64(g.runs[0].NCPU)
	b := g.med(busy)
	type share struct {
		name  string
		cores float64
	}
	var sh []share
	for _, c := range cpuColumns {
		if v := g.med(cpuOf(c)); !math.IsNaN(v) && v >= 0.02 {
			sh = append(sh, share{c, v})
		}
	}
	if o := g.med(other); o >= 0.02 {
		sh = append(sh, share{"other processes", o})
	}
	sort.Slice(sh, func(i, j int) bool { return sh[i].cores > sh[j].cores })
	var parts []string
	for i, s := range sh {
		if i == 3 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", s.name, s.cores))
	}
	var msg string
	if b >= 0.9*n {
		msg = fmt.Sprintf("CPU-bound: %.2f of %.0f cores busy; most CPU: %s", b, n, strings.Join(parts, ", "))
	} else {
		msg = fmt.Sprintf("not CPU-bound (%.2f of %.0f cores busy): the rest is waiting (I/O, commits, locks); most CPU: %s", b, n, strings.Join(parts, ", "))
	}
	if o := g.med(other); o >= 0.25*n {
		msg += fmt.Sprintf("; other processes on the machine took %.2f cores, so this figure is low", o)
	}
	if r := g.med(cpuOf("redis-server")); r >= 0.85 {
		msg += fmt.Sprintf("; Redis's single thread is near saturation (%.2f core)", r)
	}
	return msg
}

type verdict struct {
	target, measured, result string
}

func passFail(ok bool, measured bool) string {
	switch {
	case !measured:
		return "not measured"
	case ok:
		return "**pass**"
	}
	return "**FAIL**"
}

func targets(gs map[groupKey]*group, conns []int, soak []Result) []verdict {
	var v []verdict
	get := func(s string, c int, l string) *group { return gs[groupKey{s, c, l}] }
	for _, c := range conns {
		q, b := get(ScenarioApply, c, LabelQC), get(ScenarioApply, c, LabelBaseline)
		qv, bv := q.med(reqPS), b.med(reqPS)
		ok := !math.IsNaN(qv) && !math.IsNaN(bv)
		v = append(v, verdict{
			fmt.Sprintf("apply ≥ 0.6× baseline req/s, %d connections", c),
			fmt.Sprintf("%s vs %s req/s = %s", f0(qv), f0(bv), ratio(qv, bv)),
			passFail(ok && qv >= 0.6*bv, ok),
		})
	}
	for _, c := range conns {
		if c != 50 {
			continue
		}
		q := get(ScenarioApply, c, LabelQC)
		pv := q.med(p99)
		v = append(v, verdict{"apply p99 ≤ 10 ms, 50 connections", f2(pv) + " ms", passFail(pv <= 10, !math.IsNaN(pv))})
	}
	for _, c := range conns {
		q := get(ScenarioSession, c, LabelQC)
		sv := q.med(sessPS)
		v = append(v, verdict{fmt.Sprintf("apply → finish ≥ 7,000 sessions/s, %d connections", c),
			f0(sv) + " sessions/s", passFail(sv >= 7000, !math.IsNaN(sv))})
	}
	for _, c := range conns {
		q, b := get(ScenarioHeartbeat, c, LabelQC), get(ScenarioHeartbeat, c, LabelBaseline)
		qv, bv := q.med(reqPS), b.med(reqPS)
		ok := !math.IsNaN(qv) && !math.IsNaN(bv)
		v = append(v, verdict{fmt.Sprintf("heartbeat ≥ 0.8× baseline req/s, %d connections", c),
			fmt.Sprintf("%s vs %s req/s = %s", f0(qv), f0(bv), ratio(qv, bv)), passFail(ok && qv >= 0.8*bv, ok)})
	}
	// RSS at 200 connections: the peak (VmHWM) seen at the end of any
	// 200-connection run; VmHWM is the peak since start, so it also covers
	// everything before.
	hwm := math.NaN()
	for k, g := range gs {
		if k.label != LabelQC || k.conns < 200 {
			continue
		}
		if m := g.max(func(r Result) float64 { return r.Mem[LabelQC].HWM }); math.IsNaN(hwm) || m > hwm {
			hwm = m
		}
	}
	for _, r := range soak {
		if m := r.Mem[LabelQC].HWM; m > 0 && (math.IsNaN(hwm) || m > hwm) {
			hwm = m
		}
	}
	v = append(v, verdict{"quota-center RSS ≤ 150 MiB at 200 connections", "peak (VmHWM) " + f0(hwm) + " MiB", passFail(hwm <= 150, !math.IsNaN(hwm) && hwm > 0)})
	if len(soak) > 0 {
		gr, msg := growth(soak[0])
		v = append(v, verdict{fmt.Sprintf("no goroutine or memory growth over a %.0f s run", soak[0].DurationS), msg, passFail(!gr, len(soak[0].Samples) >= 4)})
	} else {
		v = append(v, verdict{"no goroutine or memory growth over a 60 s run", "no long run in this report", passFail(false, false)})
	}
	return v
}

// growth compares the first and last thirds of a long run's samples (the
// first sample is skipped: pools still fill). RSS may rise 10%, goroutines
// 10% + 20, before it counts as growth.
func growth(r Result) (bool, string) {
	s := r.Samples
	if len(s) > 1 {
		s = s[1:]
	}
	if len(s) < 3 {
		return false, "too few samples"
	}
	third := len(s) / 3
	avg := func(xs []Sample, f func(Sample) float64) float64 {
		t := 0.0
		for _, x := range xs {
			t += f(x)
		}
		return t / float64(len(xs))
	}
	rss := func(x Sample) float64 { return x.RSS[LabelQC] }
	gor := func(x Sample) float64 { return float64(x.Goroutines) }
	r0, r1 := avg(s[:third], rss), avg(s[len(s)-third:], rss)
	g0, g1 := avg(s[:third], gor), avg(s[len(s)-third:], gor)
	// Peaks too: the averages hide a spike.
	var rmax float64
	for _, x := range s {
		rmax = math.Max(rmax, x.RSS[LabelQC])
	}
	grew := r1 > r0*1.10 || (g1 > g0*1.10+20)
	return grew, fmt.Sprintf("RSS %.0f → %.0f MiB (peak %.0f), goroutines %.0f → %.0f (averages of the first and last third of %d samples after the first)", r0, r1, rmax, g0, g1, len(s))
}
