package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeQC is an in-memory quota-center: policies, a real balance per
// resource and idempotent sessions, enough for qc-replay.
type fakeQC struct {
	t          *testing.T
	apiKey     string
	adminToken string

	// Faults.
	bug           string // "charge-granted": finish charges the grant; "keep-reserved": finish leaves the reservation
	lostEvery     int    // every n-th apply and finish does its work, then answers 503 (a lost answer)
	finishDown    bool   // every finish answers 503 without doing anything
	periodStart   time.Time
	policyCreated map[string]time.Time

	mu       sync.Mutex
	limits   map[string]int64
	used     map[string]int64
	reserved map[string]int64
	sessions map[string]*fakeSession
	applies  int
	finishes int
	seenKeys map[string]int // X-API-Key values seen on /quota/*
}

type fakeSession struct {
	resource        string
	amount, granted int64
	clientID        string
	applyResp       map[string]any
	finished        bool
	actual          int64
	finishResp      map[string]any
	applyHTTPCalls  int
	finishHTTPCalls int
}

func newFakeQC(t *testing.T) (*fakeQC, *httptest.Server) {
	f := &fakeQC{
		t:             t,
		periodStart:   time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC),
		policyCreated: map[string]time.Time{},
		limits:        map[string]int64{},
		used:          map[string]int64{},
		reserved:      map[string]int64{},
		sessions:      map[string]*fakeSession{},
		seenKeys:      map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /quota/apply", f.quota(f.apply))
	mux.HandleFunc("POST /quota/finish", f.quota(f.finish))
	mux.HandleFunc("GET /quota/status", f.quota(f.status))
	mux.HandleFunc("PUT /admin/policies/{resourceName}", f.putPolicy)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 404, "NOT_FOUND", "no route "+r.URL.Path, nil)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"success": false, "code": code, "message": msg}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

// quota wraps a client endpoint: API key, JSON content type, lock.
func (f *fakeQC) quota(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seenKeys[r.Header.Get("X-API-Key")]++
		if f.apiKey != "" && r.Header.Get("X-API-Key") != f.apiKey {
			writeErr(w, 401, "UNAUTHENTICATED", "bad API key", nil)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
			writeErr(w, 415, "UNSUPPORTED_MEDIA_TYPE", "want JSON", nil)
			return
		}
		h(w, r)
	}
}

func (f *fakeQC) apply(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ResourceName string `json:"resourceName"`
		ApplyAmount  int64  `json:"applyAmount"`
		ClientID     string `json:"clientId"`
		SessionID    string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ApplyAmount < 1 || req.SessionID == "" {
		writeErr(w, 400, "INVALID_ARGUMENT", fmt.Sprintf("bad apply %+v: %v", req, err), nil)
		return
	}
	limit, ok := f.limits[req.ResourceName]
	if !ok {
		writeErr(w, 404, "RESOURCE_NOT_FOUND", "no policy", nil)
		return
	}
	f.applies++
	lost := f.lostEvery > 0 && f.applies%f.lostEvery == 0
	if s, ok := f.sessions[req.SessionID]; ok {
		s.applyHTTPCalls++
		if s.resource != req.ResourceName || s.amount != req.ApplyAmount || s.clientID != req.ClientID {
			writeErr(w, 409, "SESSION_CONFLICT", "session reused", nil)
			return
		}
		writeJSON(w, 200, s.applyResp) // replay: nothing reserved again
		return
	}
	remaining := limit - f.used[req.ResourceName] - f.reserved[req.ResourceName]
	if req.ApplyAmount > remaining {
		writeErr(w, 429, "QUOTA_EXHAUSTED", "not enough quota", map[string]any{"remainingQuota": remaining})
		return
	}
	f.reserved[req.ResourceName] += req.ApplyAmount
	resp := map[string]any{
		"success": true, "code": "SUCCESS", "sessionId": req.SessionID, "grantedAmount": req.ApplyAmount,
		"remainingQuota": remaining - req.ApplyAmount, "leaseExpiresAt": time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339),
		"heartbeatIntervalSeconds": 100,
	}
	f.sessions[req.SessionID] = &fakeSession{resource: req.ResourceName, amount: req.ApplyAmount, granted: req.ApplyAmount,
		clientID: req.ClientID, applyResp: resp, applyHTTPCalls: 1}
	if lost {
		writeErr(w, 503, "BACKEND_UNAVAILABLE", "answer lost", nil)
		return
	}
	writeJSON(w, 200, resp)
}

func (f *fakeQC) finish(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ResourceName     string `json:"resourceName"`
		SessionID        string `json:"sessionId"`
		ActualUsedAmount *int64 `json:"actualUsedAmount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ActualUsedAmount == nil {
		writeErr(w, 400, "INVALID_ARGUMENT", "bad finish", nil)
		return
	}
	if f.finishDown {
		writeErr(w, 503, "BACKEND_UNAVAILABLE", "redis down", nil)
		return
	}
	s, ok := f.sessions[req.SessionID]
	if !ok || s.resource != req.ResourceName {
		writeErr(w, 404, "SESSION_NOT_FOUND", "no session", nil)
		return
	}
	s.finishHTTPCalls++
	actual := *req.ActualUsedAmount
	if s.finished {
		if actual != s.actual {
			writeErr(w, 409, "SESSION_CONFLICT", "other actual", nil)
			return
		}
		writeJSON(w, 200, s.finishResp)
		return
	}
	f.finishes++
	lost := f.lostEvery > 0 && f.finishes%f.lostEvery == 0
	charged := actual
	if f.bug == "charge-granted" {
		charged = s.granted
	}
	f.used[s.resource] += charged
	if f.bug != "keep-reserved" {
		f.reserved[s.resource] -= s.granted
	}
	s.finished, s.actual = true, actual
	s.finishResp = map[string]any{
		"success": true, "code": "SUCCESS", "sessionId": req.SessionID, "grantedAmount": s.granted,
		"chargedAmount": actual, "refundedAmount": max(s.granted-actual, 0), "overageAmount": max(actual-s.granted, 0),
		"remainingQuota": f.limits[s.resource] - f.used[s.resource] - f.reserved[s.resource],
	}
	if lost {
		writeErr(w, 503, "BACKEND_UNAVAILABLE", "answer lost", nil)
		return
	}
	writeJSON(w, 200, s.finishResp)
}

func (f *fakeQC) status(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("resourceName")
	limit, ok := f.limits[name]
	if !ok {
		writeErr(w, 404, "RESOURCE_NOT_FOUND", "no policy", nil)
		return
	}
	active := 0
	for _, s := range f.sessions {
		if s.resource == name && !s.finished {
			active++
		}
	}
	writeJSON(w, 200, map[string]any{
		"success": true, "code": "SUCCESS", "resourceName": name, "quotaType": "TOKENS", "totalLimit": limit,
		"usedAmount": f.used[name], "reservedAmount": f.reserved[name],
		"remainingQuota": limit - f.used[name] - f.reserved[name], "activeSessions": active,
		"periodStart": f.periodStart.Format(time.RFC3339), "nextResetAt": nil,
	})
}

func (f *fakeQC) putPolicy(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.adminToken != "" && r.Header.Get("Authorization") != "Bearer "+f.adminToken {
		writeErr(w, 401, "UNAUTHENTICATED", "bad token", nil)
		return
	}
	var spec struct {
		QuotaType  string  `json:"quotaType"`
		TotalLimit int64   `json:"totalLimit"`
		ResetCron  *string `json:"resetCron"`
	}
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil || spec.QuotaType != "TOKENS" || spec.TotalLimit < 1 ||
		spec.ResetCron == nil || *spec.ResetCron != "" {
		writeErr(w, 400, "INVALID_ARGUMENT", "bad policy", nil)
		return
	}
	name := r.PathValue("resourceName")
	status := 200
	if _, ok := f.policyCreated[name]; !ok {
		status = 201
		f.policyCreated[name] = time.Now().UTC()
	}
	f.limits[name] = spec.TotalLimit
	writeJSON(w, status, map[string]any{
		"resourceName": name, "quotaType": spec.QuotaType, "totalLimit": spec.TotalLimit, "resetCron": "",
		"timezone": "UTC", "leakThresholdSeconds": 300,
		"createdAt": f.policyCreated[name].Format(time.RFC3339Nano), "updatedAt": time.Now().UTC().Format(time.RFC3339Nano),
	})
}

// seed creates a policy directly, with some prior usage.
func (f *fakeQC) seed(resource string, limit, used int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits[resource] = limit
	f.used[resource] = used
	f.policyCreated[resource] = time.Now()
}

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
