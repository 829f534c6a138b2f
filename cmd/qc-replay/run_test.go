package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// traceCSV writes n rows: context 1000+i, generated (i*37)%300, rows gap
// apart starting at 2023-11-16 18:17:03.9799600.
func traceCSV(t *testing.T, n int, gap time.Duration) string {
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	t0 := time.Date(2023, 11, 16, 18, 17, 3, 979960000, time.UTC)
	for i := 0; i < n; i++ {
		ts := t0.Add(time.Duration(i) * gap).Format("2006-01-02 15:04:05.0000000")
		fmt.Fprintf(&b, "%s,%d,%d\n", ts, 1000+i, (i*37)%300)
	}
	return writeFile(t, b.String())
}

// traceTotals returns the sum of context+generated over n rows of traceCSV.
func traceTotals(n int) int64 {
	var s int64
	for i := 0; i < n; i++ {
		s += int64(1000+i) + int64((i*37)%300)
	}
	return s
}

// field reads an integer summary field like "granted:          12".
func field(t *testing.T, out, name string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `:\s+(-?\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in output:\n%s", name, out)
	}
	v, _ := strconv.ParseInt(m[1], 10, 64)
	return v
}

func runCmd(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut strings.Builder
	err := run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestRunEndToEndWithLimit(t *testing.T) {
	f, srv := newFakeQC(t)
	f.apiKey, f.adminToken = "key-1", "adm-1"
	trace := traceCSV(t, 40, 10*time.Millisecond)
	out, stderr, err := runCmd(t, context.Background(), "--url", srv.URL, "--trace", trace, "--limit", "12000",
		"--max-tokens", "200", "--concurrency", "8", "--admin-token", "adm-1", "--api-key", "key-1", "--client-id", "tester")
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "check: OK") || !strings.Contains(out, "policy llm_tokens created") {
		t.Errorf("output:\n%s", out)
	}
	granted, refused := field(t, out, "granted"), field(t, out, "refused (429)")
	if field(t, out, "rows") != 40 || granted+refused != 40 || granted == 0 || refused == 0 {
		t.Errorf("rows/granted/refused wrong:\n%s", out)
	}
	if field(t, out, "errors") != 0 {
		t.Errorf("errors:\n%s", out)
	}
	if field(t, out, "requests") != 40+granted {
		t.Errorf("requests != applies + finishes:\n%s", out)
	}
	f.mu.Lock()
	if f.used["llm_tokens"] != field(t, out, "tokens charged") || f.reserved["llm_tokens"] != 0 {
		t.Errorf("fake used %d reserved %d:\n%s", f.used["llm_tokens"], f.reserved["llm_tokens"], out)
	}
	if f.seenKeys["key-1"] == 0 || len(f.seenKeys) != 1 {
		t.Errorf("API keys seen: %v", f.seenKeys)
	}
	for id, s := range f.sessions {
		if s.clientID != "tester" || !s.finished {
			t.Errorf("session %s: %+v", id, s)
		}
	}
	// Charged = actual; refunded − overage = granted − charged.
	if field(t, out, "tokens granted")-field(t, out, "tokens charged") !=
		field(t, out, "tokens refunded")-field(t, out, "tokens overage") {
		t.Errorf("token totals inconsistent:\n%s", out)
	}
	if field(t, out, "tokens overage") == 0 {
		t.Errorf("expected some overage (generated > max-tokens):\n%s", out)
	}
	f.mu.Unlock()

	// A second run updates the policy.
	out, _, err = runCmd(t, context.Background(), "--url", srv.URL, "--trace", trace, "--limit", "1000000",
		"--max-tokens", "200", "--admin-token", "adm-1", "--api-key", "key-1", "--rows", "5")
	if err != nil || !strings.Contains(out, "policy llm_tokens updated") || field(t, out, "rows") != 5 || field(t, out, "granted") != 5 {
		t.Errorf("second run: %v\n%s", err, out)
	}
}

func TestRunAllGrantedTotals(t *testing.T) {
	f, srv := newFakeQC(t)
	f.seed("llm_tokens", 1<<40, 777) // prior usage by an earlier run
	trace := traceCSV(t, 30, 0)
	out, _, err := runCmd(t, context.Background(), "--url", srv.URL, "--trace", trace, "--max-tokens", "512", "--concurrency", "4")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if field(t, out, "tokens charged") != traceTotals(30) || field(t, out, "granted") != 30 {
		t.Errorf("charged %d, want %d:\n%s", field(t, out, "tokens charged"), traceTotals(30), out)
	}
	var wantGranted int64
	for i := 0; i < 30; i++ {
		wantGranted += int64(1000+i) + 512
	}
	if field(t, out, "tokens granted") != wantGranted {
		t.Errorf("granted %d, want %d", field(t, out, "tokens granted"), wantGranted)
	}
	if !strings.Contains(out, "check: OK") {
		t.Errorf("output:\n%s", out)
	}
}

func TestRunRetriesLostAnswers(t *testing.T) {
	f, srv := newFakeQC(t)
	f.seed("llm_tokens", 1<<40, 0)
	f.lostEvery = 3
	out, _, err := runCmd(t, context.Background(), "--url", srv.URL, "--trace", traceCSV(t, 30, 0), "--concurrency", "6")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "check: OK") || field(t, out, "errors") != 0 || field(t, out, "tokens charged") != traceTotals(30) {
		t.Errorf("output:\n%s", out)
	}
	if !regexp.MustCompile(`retries [1-9]`).MatchString(out) {
		t.Errorf("no retries reported:\n%s", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	retried := 0
	for _, s := range f.sessions {
		if s.applyHTTPCalls > 1 {
			retried++
		}
	}
	if len(f.sessions) != 30 || retried == 0 {
		t.Errorf("sessions %d, retried applies %d", len(f.sessions), retried)
	}
}

func TestRunCheckFailsWithWrongServer(t *testing.T) {
	for _, bug := range []string{"charge-granted", "keep-reserved"} {
		t.Run(bug, func(t *testing.T) {
			f, srv := newFakeQC(t)
			f.seed("llm_tokens", 1<<40, 0)
			f.bug = bug
			out, _, err := runCmd(t, context.Background(), "--url", srv.URL, "--trace", traceCSV(t, 10, 0))
			if !errors.Is(err, errCheckFailed) {
				t.Fatalf("err = %v, want check failed\n%s", err, out)
			}
			if !strings.Contains(out, "check: FAILED") || strings.Contains(out, "check: OK") {
				t.Errorf("output:\n%s", out)
			}
		})
	}
}

func TestRunFinishUnavailable(t *testing.T) {
	f, srv := newFakeQC(t)
	f.seed("llm_tokens", 1<<40, 0)
	f.finishDown = true
	out, _, err := runCmd(t, context.Background(), "--url", srv.URL, "--trace", traceCSV(t, 4, 0), "--concurrency", "4")
	if err == nil || !strings.Contains(err.Error(), "4 call(s) failed other than with 429") || !errors.Is(err, errCheckFailed) {
		t.Fatalf("err = %v\n%s", err, out)
	}
	if !strings.Contains(out, "finish BACKEND_UNAVAILABLE:") || !strings.Contains(out, "retries 12") {
		t.Errorf("output:\n%s", out)
	}
}

func TestRunSpeedupHonoursGaps(t *testing.T) {
	f, srv := newFakeQC(t)
	f.seed("llm_tokens", 1<<40, 0)
	start := time.Now()
	// 5 rows 1 s apart at 20× → about 200 ms.
	out, _, err := runCmd(t, context.Background(), "--url", srv.URL, "--trace", traceCSV(t, 5, time.Second), "--speedup", "20")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("run took %v, want ≥ 200ms", d)
	}
	if !strings.Contains(out, "check: OK") {
		t.Errorf("output:\n%s", out)
	}
}

func TestRunInterrupted(t *testing.T) {
	f, srv := newFakeQC(t)
	f.seed("llm_tokens", 1<<40, 0)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	out, _, err := runCmd(t, ctx, "--url", srv.URL, "--trace", traceCSV(t, 3, 10*time.Second), "--speedup", "1")
	if err == nil || !strings.Contains(err.Error(), "interrupted after 1 of 3 rows") {
		t.Fatalf("err = %v\n%s", err, out)
	}
	if !strings.Contains(out, "check: OK") {
		t.Errorf("started rows must be completed:\n%s", out)
	}
}

func TestRunSetupErrors(t *testing.T) {
	f, srv := newFakeQC(t)
	f.adminToken = "right"
	good := traceCSV(t, 2, 0)
	for _, tc := range []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{"no policy", []string{"--url", srv.URL, "--trace", good}, "--limit", false},
		{"bad admin token", []string{"--url", srv.URL, "--trace", good, "--limit", "10", "--admin-token", "wrong"}, "UNAUTHENTICATED", false},
		{"missing column", []string{"--url", srv.URL, "--trace", writeFile(t, "TIMESTAMP,ContextTokens\n")}, "GeneratedTokens", false},
		{"no rows", []string{"--url", srv.URL, "--trace", writeFile(t, "TIMESTAMP,ContextTokens,GeneratedTokens\n")}, "no rows", false},
		{"missing file", []string{"--url", srv.URL, "--trace", "/nonexistent/x.csv"}, "x.csv", false},
		{"bad url", []string{"--url", "localhost:8080", "--trace", good}, "bad base URL", true},
		{"zero concurrency", []string{"--concurrency", "0"}, "--concurrency", true},
		{"negative speedup", []string{"--speedup", "-1"}, "--speedup", true},
		{"zero max tokens", []string{"--max-tokens", "0"}, "--max-tokens", true},
		{"unknown flag", []string{"--nope"}, "nope", true},
		{"extra arg", []string{"extra"}, "extra", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, context.Background(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q\n%s", err, tc.want, out)
			}
			var ue *usageError
			if errors.As(err, &ue) != tc.usage {
				t.Errorf("usage error = %v, want %v", !tc.usage, tc.usage)
			}
		})
	}
	_, _, err := runCmd(t, context.Background(), "-h")
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}
