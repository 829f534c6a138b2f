package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer checks the order of each session's steps: a step that arrives
// before the previous one was answered gets 409, so a run with no non-2xx
// answers shows the driver waited every time.
type fakeServer struct {
	mu       sync.Mutex
	next     map[string]int // session id → index of the step expected next
	steps    []string
	finished int
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "want a JSON POST", http.StatusBadRequest)
		return
	}
	var body struct {
		ResourceName string `json:"resourceName"`
		SessionID    string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.SessionID == "" || body.ResourceName != "res-1" {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	// Answer a little later, so an out-of-order step would have time to
	// overtake.
	time.Sleep(200 * time.Microsecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	want := f.next[body.SessionID]
	if want >= len(f.steps) || r.URL.Path != f.steps[want] {
		http.Error(w, "out of order: "+r.URL.Path, http.StatusConflict)
		return
	}
	f.next[body.SessionID] = want + 1
	if want+1 == len(f.steps) {
		f.finished++
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"success":true,"sessionId":"`+body.SessionID+`"}`)
}

func runFake(t *testing.T, scenario string, steps []string) (Result, *fakeServer) {
	t.Helper()
	f := &fakeServer{next: map[string]int{}, steps: steps}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out, errOut bytes.Buffer
	err := runMain(context.Background(), []string{"--url", srv.URL, "--scenario", scenario,
		"--connections", "16", "--duration", "300ms", "--warmup", "100ms", "--resource", "res-1",
		"--heartbeat-pool", "20", "--label", "fake", "--watch", "self=" + strconv.Itoa(os.Getpid())}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	var r Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	return r, f
}

func TestSessionStepsWaitForTheirAnswers(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		steps    []string
	}{
		{ScenarioApply, []string{"/quota/apply"}},
		{ScenarioSession, []string{"/quota/apply", "/quota/finish"}},
		{ScenarioHeartbeatSession, []string{"/quota/apply", "/quota/heartbeat", "/quota/heartbeat", "/quota/finish"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r, f := runFake(t, tc.scenario, tc.steps)
			if r.Non2xx != 0 || r.Requests == 0 {
				t.Fatalf("requests %d, non-2xx %d (%v): a step was sent before its predecessor was answered", r.Requests, r.Non2xx, r.Errors)
			}
			if r.Sessions == 0 || r.SessionsPS <= 0 || r.ReqPerS <= 0 {
				t.Fatalf("no sessions counted: %+v", r)
			}
			// Sessions left open when the window closed are bounded by the
			// number of workers.
			if r.OpenAtEnd > 2*16+1 {
				t.Errorf("open sessions at the end = %d, want at most about the 16 workers", r.OpenAtEnd)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if uint64(f.finished) < r.Sessions {
				t.Errorf("server saw %d complete sessions, report says %d (of the measured phase)", f.finished, r.Sessions)
			}
			if _, ok := r.CPU["qc-bench"]; !ok {
				t.Errorf("no CPU of qc-bench itself: %v", r.CPU)
			}
		})
	}
}

func TestHeartbeatScenarioOpensAPoolFirst(t *testing.T) {
	// The pool's applies are step 0 of each session; the run then only
	// heartbeats, which the fake server accepts once per step index, so
	// allow unlimited heartbeats by listing many.
	steps := []string{"/quota/apply"}
	for range 10000 {
		steps = append(steps, "/quota/heartbeat")
	}
	r, _ := runFake(t, ScenarioHeartbeat, steps)
	if r.Non2xx != 0 || r.Steps["heartbeat"].Count == 0 || r.Steps["apply"].Count != 0 {
		t.Fatalf("heartbeat run: non-2xx %d %v, steps %v", r.Non2xx, r.Errors, r.Steps)
	}
}

func TestOnlyLoopbackTargets(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:80", "http://127.1.2.3:9"} {
		if err := loopbackOnly(u); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "https://127.0.0.1", "http://192.168.1.1"} {
		if err := loopbackOnly(u); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
	if _, err := parseRun([]string{"--duration", "11m"}); err == nil {
		t.Error("an 11-minute run was accepted")
	}
}

func TestReportFromRuns(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for _, l := range []string{LabelBaseline, LabelQC} {
		for rep := 1; rep <= 2; rep++ {
			r := Result{Label: l, Scenario: ScenarioApply, Connections: 50, Rep: rep, ReqPerS: 1000, SessionsPS: 1000,
				Latency: Lat{P50: 1, P90: 2, P99: 3}, NCPU: 2, MachineBusy: 1.9,
				CPU: map[string]float64{l: 0.8, "redis-server": 0.3}, Status: map[string]uint64{"200": 10}}
			if l == LabelQC {
				r.ReqPerS = 700
				r.Mem = map[string]Mem{LabelQC: {RSS: 40, HWM: 50}}
			}
			b, _ := json.Marshal(r)
			lines = append(lines, string(b))
		}
	}
	res := filepath.Join(dir, "r.jsonl")
	if err := os.WriteFile(res, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := reportMain([]string{"--results", res}, &out); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{"| 50 | quota-center | 700 |", "0.70×", "apply ≥ 0.6× baseline req/s, 50 connections | 700 vs 1,000 req/s = 0.70× | **pass**"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestReportAddsTwoInstancesHandlersAndNotes(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rs ...Result) string {
		var lines []string
		for _, r := range rs {
			b, _ := json.Marshal(r)
			lines = append(lines, string(b))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one := Result{Label: LabelQC, Scenario: ScenarioApply, Connections: 50, Rep: 1, ReqPerS: 900, SessionsPS: 900, NCPU: 2}
	a := Result{Label: LabelInstanceA, Scenario: ScenarioApply, Connections: 25, Rep: 1, ReqPerS: 400, SessionsPS: 400, Latency: Lat{P99: 7}}
	b := a
	b.Label, b.ReqPerS, b.SessionsPS, b.Latency.P99, b.Non2xx = LabelInstanceB, 450, 450, 9, 2
	res, two := write("r.jsonl", one), write("two.jsonl", a, b)
	handlers := filepath.Join(dir, "h.txt")
	notes := filepath.Join(dir, "n.md")
	_ = os.WriteFile(handlers, []byte("HandlerApply 91 → 40 allocs\n"), 0o644)
	_ = os.WriteFile(notes, []byte("## Hand-written\n\nnote text\n"), 0o644)
	var out bytes.Buffer
	if err := reportMain([]string{"--results", res, "--two", two, "--handlers", handlers, "--notes", notes}, &out); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"| apply | 50 | 400 | 450 | 850 | 850 | 9.00 | 900 | 2 |",
		"## Handler benchmarks, before and after", "HandlerApply 91 → 40 allocs",
		"## Hand-written\n\nnote text",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(md), "note text") {
		t.Errorf("the notes are not the report's last section:\n%s", md)
	}
}
