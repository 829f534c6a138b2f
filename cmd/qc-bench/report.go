package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// Server labels scripts/bench.sh uses; the report compares the second to
// the first.
const (
	LabelBaseline = "baseline"
	LabelQC       = "quota-center"
	// The two instances of the two-instance runs.
	LabelInstanceA = "instance-a"
	LabelInstanceB = "instance-b"
)

// Process names the CPU split lists, in this order.
var cpuColumns = []string{LabelQC, LabelBaseline, "redis-server", "mariadbd", "qc-bench"}

type kv struct{ k, v string }

type reportInput struct {
	results []Result
	soak    []Result
	meta    []kv
	gobench string
	// handlers is benchstat's comparison of the handler benchmarks
	// (internal/httpapi/bench_test.go) before and after.
	handlers string
	// notes is hand-written Markdown appended at the end.
	notes string
	// two is the two-instance runs (LabelInstanceA and LabelInstanceB at
	// the same time, on the same Redis and database).
	two []Result
	// wrk is the headline runs driven by wrk (issue 11).
	wrk []WrkRun
}

func (in reportInput) metaGet(k string) string {
	for _, e := range in.meta {
		if e.k == k {
			return e.v
		}
	}
	return ""
}

func (in reportInput) metaAll(k string) []string {
	var out []string
	for _, e := range in.meta {
		if e.k == k {
			out = append(out, e.v)
		}
	}
	return out
}

func reportMain(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("qc-bench report", flag.ContinueOnError)
	results := fs.String("results", "", "JSON lines printed by the qc-bench runs (required unless --wrk is given)")
	wrk := fs.String("wrk", "", "JSON lines of the wrk runs (scripts/bench.sh; optional)")
	soak := fs.String("soak", "", "JSON lines of the long run (optional)")
	meta := fs.String("meta", "", "KEY=VALUE lines about the machine and the commands (optional)")
	gobench := fs.String("gobench", "", "output of go test -bench (optional)")
	handlers := fs.String("handlers", "", "benchstat output of the handler benchmarks, before and after (optional)")
	two := fs.String("two", "", "JSON lines of the two-instance runs: labels instance-a and instance-b, run at the same time (optional)")
	notes := fs.String("notes", "", "Markdown appended as the report's last section (optional)")
	out := fs.String("out", "", "write the Markdown here instead of stdout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *results == "" && *wrk == "" {
		return fmt.Errorf("report: --results or --wrk is required")
	}
	var in reportInput
	var err error
	for _, f := range []struct {
		path string
		dst  *[]Result
	}{{*results, &in.results}, {*soak, &in.soak}, {*two, &in.two}} {
		if f.path == "" {
			continue
		}
		if *f.dst, err = readResults(f.path); err != nil {
			return err
		}
	}
	if *wrk != "" {
		if in.wrk, err = readWrkRuns(*wrk); err != nil {
			return err
		}
	}
	if *meta != "" {
		raw, err := os.ReadFile(*meta)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				in.meta = append(in.meta, kv{strings.TrimSpace(k), strings.TrimSpace(v)})
			}
		}
	}
	for _, f := range []struct {
		path string
		dst  *string
	}{{*gobench, &in.gobench}, {*handlers, &in.handlers}, {*notes, &in.notes}} {
		if f.path == "" {
			continue
		}
		raw, err := os.ReadFile(f.path)
		if err != nil {
			return err
		}
		*f.dst = string(raw)
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	return writeReport(w, in)
}

func readResults(path string) ([]Result, error) { return readJSONLines[Result](path) }

// readJSONLines decodes a file of JSON lines (blank lines skipped) into Ts.
func readJSONLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r T
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

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

func writeReport(w io.Writer, in reportInput) error {
	gs, scen, conns := groupResults(in.results)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }

	p("# Performance\n\n")
	p("Generated by `make bench` (scripts/bench.sh) on %s; rerun it rather than editing this file. ", or(in.metaGet("date"), "an unknown date"))
	p("Issues 4 and 11 describe what is measured and the targets. Every figure below is from one run of the script: the baseline and quota-center (and envoyproxy/ratelimit when given) were measured in the same run, repetitions interleaved (baseline, quota-center, baseline, …), on the same Redis.\n\n")
	noisy := 0
	for _, r := range in.results {
		if r.NCPU > 0 && other(r) >= 0.25*float64(r.NCPU) {
			noisy++
		}
	}
	if noisy > 0 {
		p("> **Caution: %d of %d runs shared the machine with other work** that took a quarter of its CPU or more (the \"other\" column of the CPU tables). Those figures understate both servers and vary widely between repetitions; compare each server with the baseline run next to it, and rerun `make bench` on a quiet machine for absolute figures.\n\n", noisy, len(in.results))
	}

	p("## Machine\n\n| | |\n|---|---|\n")
	for _, k := range []string{"host", "cpu", "nproc", "memory", "kernel", "go", "redis", "mariadb", "commit"} {
		if v := in.metaGet(k); v != "" {
			p("| %s | %s |\n", k, mdCell(v))
		}
	}
	p("\n")

	if len(in.wrk) > 0 {
		writeWrk(p, in.wrk, in)
	}
	if len(in.results) == 0 {
		writeTail(p, in, nil)
		return nil
	}

	p("## How it was measured (qc-bench)\n\n")
	for _, line := range in.metaAll("how") {
		p("- %s\n", line)
	}
	p("- Load generator: `qc-bench` (cmd/qc-bench), built on vegeta's attack library: rate 0 (no pacing), workers = connections, each with one request in flight; the first request of a connection count is preceded by an unmeasured warm-up on the same connections. Steps of a session are dependent: a session's next request is issued only after the 2xx answer to its previous one was read, with many sessions interleaved; session ids are client-chosen.\n")
	p("- req/s counts 2xx answers over the measured window (first request sent to last answer read); a session is counted when its last step answered 2xx. p50/p90/p99 are over every request of the run (all steps); the tables give the median over the repetitions of each figure.\n")
	p("- CPU: utime+stime from /proc/<pid>/stat of each process over the measured window, in cores (1.00 = one core busy the whole window); \"machine\" is all of /proc/stat except idle and iowait. The load generator shares the %s cores with the servers, Redis and MariaDB.\n", or(in.metaGet("nproc"), "machine's"))
	for _, line := range in.metaAll("note") {
		p("- %s\n", line)
	}
	if cmds := in.metaAll("command"); len(cmds) > 0 {
		p("\nCommands:\n\n```sh\n")
		for _, c := range cmds {
			p("%s\n", c)
		}
		p("```\n")
	}
	p("\n")

	p("## Targets (issue 4, §3), as measured by qc-bench in this run\n\n| target | measured (quota-center, median) | result |\n|---|---|---|\n")
	for _, v := range targets(gs, conns, in.soak) {
		p("| %s | %s | %s |\n", v.target, mdCell(v.measured), v.result)
	}
	p("\n")

	p("## Results (qc-bench)\n\n")
	for _, s := range scen {
		p("### %s (`%s`)\n\n", or(scenarioTitle[s], s), s)
		p("| connections | server | req/s | sessions/s | p50 ms | p90 ms | p99 ms | req/s vs baseline | req/s of each rep | non-2xx |\n")
		p("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
		for _, c := range conns {
			base := gs[groupKey{s, c, LabelBaseline}]
			for _, l := range labelsOf(gs, s, c) {
				g := gs[groupKey{s, c, l}]
				var reps []string
				for _, r := range g.runs {
					reps = append(reps, f0(r.ReqPerS))
				}
				sess := "–"
				if s != ScenarioHeartbeat {
					sess = f0(g.med(sessPS))
				}
				p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, l, f0(g.med(reqPS)), sess,
					f2(g.med(p50)), f2(g.med(p90)), f2(g.med(p99)), ratio(g.med(reqPS), base.med(reqPS)),
					strings.Join(reps, ", "), non2xx(g))
			}
		}
		p("\n")
		if s == ScenarioSession || s == ScenarioHeartbeatSession {
			p("Per step (median p50 / p99 ms):\n\n| connections | server | apply | heartbeat | finish |\n|---:|---|---|---|---|\n")
			for _, c := range conns {
				for _, l := range labelsOf(gs, s, c) {
					g := gs[groupKey{s, c, l}]
					cell := func(step string) string {
						a, b := g.med(stepP(step, func(l Lat) float64 { return l.P50 })), g.med(stepP(step, func(l Lat) float64 { return l.P99 }))
						if math.IsNaN(a) {
							return "–"
						}
						return f2(a) + " / " + f2(b)
					}
					p("| %d | %s | %s | %s | %s |\n", c, l, cell("apply"), cell("heartbeat"), cell("finish"))
				}
			}
			p("\n")
		}
		p("CPU split (median cores over the window; \"other\" is busy CPU of the machine used by none of these processes) and what limits the figure:\n\n| connections | server | machine | %s | other | what limits it |\n|---:|---|---:|%s---:|---|\n",
			strings.Join(cpuColumns, " | "), strings.Repeat("---:|", len(cpuColumns)))
		for _, c := range conns {
			for _, l := range labelsOf(gs, s, c) {
				g := gs[groupKey{s, c, l}]
				var cols []string
				for _, name := range cpuColumns {
					cols = append(cols, f2(g.med(cpuOf(name))))
				}
				p("| %d | %s | %s | %s | %s | %s |\n", c, l, f2(g.med(busy)), strings.Join(cols, " | "), f2(g.med(other)), limits(g))
			}
		}
		p("\n")
	}

	p("## quota-center memory and goroutines\n\n")
	p("At the end of each run (median over the repetitions; VmHWM is the peak since the process started, so it only grows through the script). Goroutines: %s\n\n", or(in.metaGet("goroutines"), "go_goroutines from /metrics, read in the middle of each measured window."))
	p("| scenario | connections | VmRSS MiB | VmHWM MiB | goroutines (mid-run) |\n|---|---:|---:|---:|---:|\n")
	for _, s := range scen {
		for _, c := range conns {
			g := gs[groupKey{s, c, LabelQC}]
			if g == nil {
				continue
			}
			gor := g.med(func(r Result) float64 {
				if r.Goroutines == 0 {
					return math.NaN()
				}
				return float64(r.Goroutines)
			})
			p("| %s | %d | %s | %s | %s |\n", s, c, f0(g.med(func(r Result) float64 { return r.Mem[LabelQC].RSS })),
				f0(g.max(func(r Result) float64 { return r.Mem[LabelQC].HWM })), f0(gor))
		}
	}
	p("\n")

	if len(in.soak) > 0 {
		r := in.soak[0]
		p("## Long run: %s at %d connections for %.0f s (quota-center)\n\n", r.Scenario, r.Connections, r.DurationS)
		p("%s req/s, %s sessions/s, p50 %s / p90 %s / p99 %s ms, non-2xx %s. Samples of quota-center's RSS and goroutines:\n\n",
			f0(r.ReqPerS), f0(r.SessionsPS), f2(r.Latency.P50), f2(r.Latency.P90), f2(r.Latency.P99), non2xx(&group{runs: []Result{r}}))
		p("| t (s) | RSS MiB | goroutines |\n|---:|---:|---:|\n")
		for _, s := range r.Samples {
			p("| %.0f | %.1f | %d |\n", s.T, s.RSS[LabelQC], s.Goroutines)
		}
		_, msg := growth(r)
		p("\n%s.\n\n", msg)
	}

	writeTail(p, in, gs)
	return nil
}

// writeTail writes the sections that follow the load runs: the handler
// benchmarks, the two-instance runs, errors and the notes.
func writeTail(p func(string, ...any), in reportInput, gs map[groupKey]*group) {
	if strings.TrimSpace(in.gobench) != "" {
		p("## In-process handler benchmarks (`go test -bench`)\n\n")
		p("%s\n\n", or(in.metaGet("gobench"), "internal/app/bench_test.go: the full HTTP stack of app.Serve over loopback, dev mode (miniredis + SQLite) and real backends; allocations are the whole process's (client and server) per operation."))
		p("```\n%s\n```\n\n", strings.TrimRight(in.gobench, "\n"))
	}

	if len(in.two) > 0 {
		writeTwo(p, in.two, gs)
	}

	if strings.TrimSpace(in.handlers) != "" {
		p("## Handler benchmarks, before and after (`go test -bench -benchmem`, benchstat)\n\n")
		p("%s\n\n", or(in.metaGet("handlers"), "internal/httpapi/bench_test.go on two revisions, compared by benchstat."))
		p("```\n%s\n```\n\n", strings.TrimRight(in.handlers, "\n"))
	}

	errs := map[string]uint64{}
	for _, r := range in.results {
		for e, n := range r.Errors {
			errs[fmt.Sprintf("%s %s %d connections: %s", r.Label, r.Scenario, r.Connections, e)] += n
		}
	}
	for _, r := range in.soak {
		for e, n := range r.Errors {
			errs[fmt.Sprintf("%s %s %d connections, long run: %s", r.Label, r.Scenario, r.Connections, e)] += n
		}
	}
	if len(errs) > 0 {
		p("## Non-2xx answers and errors\n\n")
		for _, k := range sortedKeys(errs) {
			p("- %s (×%d)\n", mdCell(k), errs[k])
		}
		p("\n")
	}
	if strings.TrimSpace(in.notes) != "" {
		p("%s\n", strings.TrimRight(in.notes, "\n"))
	}
}

func non2xx(g *group) string {
	all := g.sum(func(r Result) uint64 { return r.Non2xx })
	no429 := g.sum(func(r Result) uint64 { return r.Non2xxNo429 })
	if all == no429 {
		return withCommas(int64(all))
	}
	return fmt.Sprintf("%s (429: %s)", withCommas(int64(all)), withCommas(int64(all-no429)))
}

func labelsOf(gs map[groupKey]*group, s string, c int) []string {
	var ls []string
	for _, l := range []string{LabelBaseline, LabelQC} {
		if gs[groupKey{s, c, l}] != nil {
			ls = append(ls, l)
		}
	}
	for k := range gs {
		if k.scenario == s && k.conns == c && k.label != LabelBaseline && k.label != LabelQC {
			ls = append(ls, k.label)
		}
	}
	return ls
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// writeTwo writes the two-instance section: per scenario and total
// connections, each instance's req/s and the sum, next to one instance at
// the same total connections (from the main runs).
func writeTwo(p func(string, ...any), two []Result, single map[groupKey]*group) {
	gs, scen, conns := groupResults(two)
	p("## Two instances on the same Redis and MariaDB\n\n")
	p("Two quota-center processes, each with its own group-commit batchers and Redis pipelines, on the same Redis and database, driven at the same time by two qc-bench processes with half the connections each; combined = the sum of the two. \"One instance\" is the main table's quota-center at the same total connections. All of it shares the machine's two cores, so a second instance adds no CPU here: the point is that the sum holds up and that nothing over the limit is granted (the two-instance test, internal/app/instances_test.go, checks that).\n\n")
	p("| scenario | connections (total) | instance A req/s | instance B req/s | combined req/s | combined sessions/s | worst p99 ms | one instance req/s | non-2xx |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range scen {
		for _, c := range conns {
			a, b := gs[groupKey{sc, c, LabelInstanceA}], gs[groupKey{sc, c, LabelInstanceB}]
			if a == nil || b == nil {
				continue
			}
			ra, rb := a.med(func(r Result) float64 { return r.ReqPerS }), b.med(func(r Result) float64 { return r.ReqPerS })
			sa, sb := a.med(func(r Result) float64 { return r.SessionsPS }), b.med(func(r Result) float64 { return r.SessionsPS })
			p99 := math.Max(a.max(func(r Result) float64 { return r.Latency.P99 }), b.max(func(r Result) float64 { return r.Latency.P99 }))
			one := single[groupKey{sc, 2 * c, LabelQC}].med(func(r Result) float64 { return r.ReqPerS })
			bad := a.sum(func(r Result) uint64 { return r.Non2xx }) + b.sum(func(r Result) uint64 { return r.Non2xx })
			p("| %s | %d | %s | %s | %s | %s | %s | %s | %d |\n", sc, 2*c, f0(ra), f0(rb), f0(ra+rb), f0(sa+sb), f2(p99), f0(one), bad)
		}
	}
	p("\n")
}
