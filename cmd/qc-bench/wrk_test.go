package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wrkReport writes lines (wrk results, one JSON object each) to a file and
// returns the report made from it.
func wrkReport(t *testing.T, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wrk.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := reportMain([]string{"--wrk", path}, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// wantLines fails the test, with msg (given the missing line and the
// report), for each of wants that got does not contain.
func wantLines(t *testing.T, got, msg string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf(msg, want, got)
		}
	}
}

// TestWrkReportComputesRatesTargetsAndCPUPerAnswer feeds the report two
// servers' wrk runs with round numbers and checks the figures it derives.
func TestWrkReportComputesRatesTargetsAndCPUPerAnswer(t *testing.T) {
	line := func(scen, server string, reqs, finished int64, p99us float64, cpu float64) string {
		return fmt.Sprintf(`{"scenario":%q,"connections":50,"server":%q,"rep":1,`+
			`"wrk":{"duration_us":2000000,"requests":%d,"non2xx":0,"p50_us":1000,"p90_us":2000,"p99_us":%g,"finished":%d},`+
			`"cpu_s":{%q:%g,"redis-server":0.5,"mariadbd":0,"wrk":0.1},"machine_busy_s":3}`, scen, server, reqs, p99us, finished, server, cpu)
	}
	lines := []string{
		line("apply", LabelBaseline, 40000, 0, 3000, 1),       // 20,000 req/s, 25 µs/answer
		line("apply", LabelPeer, 20000, 0, 3000, 1),           // 10,000 req/s
		line("apply", LabelQC, 24000, 0, 4500, 1.2),           // 12,000 req/s, 50 µs/answer
		line("apply", LabelFloor, 30000, 0, 3500, 0.9),        // 15,000 req/s, 30 µs/answer
		line("session", LabelFloor, 50000, 20000, 4000, 2),    // 10,000 sessions/s
		line("session", LabelQC, 40000, 17000, 4000, 2),       // 8,500 sessions/s
		line("session", LabelBaseline, 50000, 25000, 4000, 2), // for the ratio
		line("pools", LabelQCPlain, 24000, 0, 4000, 1.2),      // 50 µs/answer
		line("pools", LabelQC, 24000, 0, 5000, 1.5),           // 62.5 µs/answer, p99 1.25×
	}
	got := wrkReport(t, lines)
	wantLines(t, got, "report lacks %q:\n%s",
		"| apply ≥ 1.0× envoyproxy/ratelimit req/s | 12,000 vs 10,000 req/s = 1.20× | **pass** |",
		"| floor of the first target: baseline+ledger (one auto-pipelined EVALSHA + the durable row, nothing else) vs envoyproxy/ratelimit req/s | 15,000 vs 10,000 req/s = 1.50× | quota-center at 0.80× of the floor |",
		"| floor of apply → finish: baseline+ledger sessions/s (durable row and its settling update) | 10,000 sessions/s = 1.25× of 8,000 | quota-center at 0.85× of the floor |",
		"| 50 | baseline+ledger | 15,000 | 15,000 | 1.00 | 2.00 | 3.50 | 0.75× | 1.50× | 15,000 | 0 |",
		"| 50 | baseline+ledger | 30 | 17 | 0 | 3 | 50 | 100 |", // 0.9 s / 30,000 …
		"| apply ≥ 0.6× the one-EVALSHA baseline req/s | 12,000 vs 20,000 req/s = 0.60× | **pass** |",
		"| apply p99 ≤ 5 ms | 4.50 ms | **pass** |",
		"| apply → finish ≥ 8,000 sessions/s | 8,500 sessions/s | **pass** |",
		"| 50 | quota-center | 12,000 | 12,000 | 1.00 | 2.00 | 4.50 | 0.60× | 1.20× | 12,000 | 0 |",
		"| 50 | quota-center | 50 | 21 | 0 | 4 | 75 | 125 |", // µs per answer: 1.2 s / 24,000 …
		"| apply on 12 lines ≤ 1.2× a plain apply, p50 (issue 13 §8) | 1.00 vs 1.00 ms = 1.00× | **pass** |",
		"| apply on 12 lines ≤ 1.2× a plain apply, p99 (issue 13 §8) | 5.00 vs 4.00 ms = 1.25× | **FAIL** |",
		"| apply on 12 lines ≤ 1.2× a plain apply, quota-center CPU per answer (issue 13 §8) | 63 vs 50 µs = 1.25× | **FAIL** |",
		"| 50 | quota-center-plain | 50 |",
	)
}

// TestWrkReportStatesTheFloorOnlyWhenItRan: without envoyproxy/ratelimit the
// floor's line gives its req/s alone; without baseline+ledger runs there is
// no floor line at all.
func TestWrkReportStatesTheFloorOnlyWhenItRan(t *testing.T) {
	report := func(servers ...string) string {
		var lines []string
		for _, s := range servers {
			lines = append(lines, fmt.Sprintf(`{"scenario":"apply","connections":50,"server":%q,"rep":1,`+
				`"wrk":{"duration_us":1000000,"requests":10000,"p99_us":1000},"cpu_s":{%q:0.5}}`, s, s))
		}
		return wrkReport(t, lines)
	}
	want := "| floor of the first target: baseline+ledger (one auto-pipelined EVALSHA + the durable row, nothing else) req/s | 10,000 req/s (envoyproxy/ratelimit not measured) | quota-center at 1.00× of the floor |"
	if got := report(LabelFloor, LabelQC); !strings.Contains(got, want) {
		t.Errorf("report lacks %q:\n%s", want, got)
	}
	if got := report(LabelBaseline, LabelPeer, LabelQC); strings.Contains(got, "floor of") {
		t.Errorf("a floor line without baseline+ledger runs:\n%s", got)
	}
}

// TestWrkReportStatesIssue23Targets feeds three reps of quota-center, the
// floor and envoyproxy/ratelimit (round numbers) and checks the verdicts of
// issue 23 §3 and the per-rep pairs, which pair runs by rep number.
func TestWrkReportStatesIssue23Targets(t *testing.T) {
	// 1 s runs; cpu is the server's own CPU seconds, redis redis-server's.
	line := func(server string, rep int, reqs int64, p99us, cpu, redis float64) string {
		return fmt.Sprintf(`{"scenario":"apply","connections":50,"server":%q,"rep":%d,`+
			`"wrk":{"duration_us":1000000,"requests":%d,"p99_us":%g},"cpu_s":{%q:%g,"redis-server":%g}}`,
			server, rep, reqs, p99us, server, cpu, redis)
	}
	lines := []string{
		// quota-center: 10,000 req/s, own 70, 90, 80 µs, Redis 25, 35, 28 µs.
		line(LabelQC, 3, 10000, 11000, 0.80, 0.28),
		line(LabelQC, 1, 10000, 10000, 0.70, 0.25),
		line(LabelQC, 2, 10000, 12000, 0.90, 0.35),
		// the floor: 10,000 req/s, p99 10 ms.
		line(LabelFloor, 1, 10000, 10000, 0.6, 0.3),
		line(LabelFloor, 2, 10000, 10000, 0.6, 0.3),
		line(LabelFloor, 3, 10000, 10000, 0.6, 0.3),
		// ratelimit: own 100, 100, 125 µs (reps 1, 2, 3).
		line(LabelPeer, 2, 10000, 9000, 1.00, 0.2),
		line(LabelPeer, 1, 10000, 9000, 1.00, 0.2),
		line(LabelPeer, 3, 10000, 9000, 1.25, 0.2),
	}
	got := wrkReport(t, lines)
	wantLines(t, got, "report lacks %q:\n%s",
		"### Targets (issue 23 §3), as measured in this run (apply, 50 connections, medians)",
		"| (a) apply ≥ 0.97× baseline+ledger req/s | 10,000 vs 10,000 req/s = 1.00× | **pass** |",
		"| (a) apply p99 ≤ 1.1× baseline+ledger's | 11.00 vs 10.00 ms = 1.10× | **pass** |",
		// medians 80 vs 100 µs; pairs 70/100, 90/100, 80/125.
		"| (b) quota-center's own CPU per apply ≤ 0.8× envoyproxy/ratelimit's own | 80 vs 100 µs = 0.80×; per rep 0.70×, 0.90×, 0.64× (median 0.70×) | **pass** |",
		"| (c) Redis CPU per apply ≤ 30 µs | 28 µs (per rep 25.0, 35.0, 28.0) | **pass** |",
	)
	// One more slow rep of quota-center tips (b), (c) and (a)'s p99; with
	// no peer, (b) is not measured.
	got = wrkReport(t, append(lines, line(LabelQC, 4, 10000, 13000, 0.95, 0.40)))
	wantLines(t, got, "with a fourth rep, report lacks %q:\n%s",
		"| (a) apply p99 ≤ 1.1× baseline+ledger's | 11.50 vs 10.00 ms = 1.15× | **FAIL** |",
		"| (b) quota-center's own CPU per apply ≤ 0.8× envoyproxy/ratelimit's own | 85 vs 100 µs = 0.85×; per rep 0.70×, 0.90×, 0.64× (median 0.70×) | **FAIL** |",
		"| (c) Redis CPU per apply ≤ 30 µs | 32 µs (per rep 25.0, 35.0, 28.0, 40.0) | **FAIL** |",
	)
	if got := wrkReport(t, lines[:6]); !strings.Contains(got, "| (b) quota-center's own CPU per apply ≤ 0.8× envoyproxy/ratelimit's own | 80 vs – µs = –; no rep of both | not measured |") {
		t.Errorf("without ratelimit's runs, (b) is not stated as not measured:\n%s", got)
	}
}
