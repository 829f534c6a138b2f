package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"
)

// recorded is one request seen by the fake server.
type recorded struct {
	Method, Path, RawQuery string
	EscapedPath            string
	Header                 http.Header
	Body                   map[string]any // nil when the body was empty
	RawBody                string
}

// fake is an httptest server answering every request with one canned answer
// and recording what it got.
type fake struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	status int
	header http.Header
	body   string
}

func newFake(t *testing.T, status int, body string) *fake {
	t.Helper()
	f := &fake{t: t, status: status, body: body, header: http.Header{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.Path, EscapedPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), RawBody: string(raw)}
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &rec.Body); err != nil {
				t.Errorf("request body is not a JSON object: %v: %s", err, raw)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		status, body := f.status, f.body
		for k, v := range f.header {
			w.Header()[k] = v
		}
		f.mu.Unlock()
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) last() recorded {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		f.t.Fatal("no request recorded")
	}
	return f.reqs[len(f.reqs)-1]
}

func newClient(t *testing.T, base string, opts ...Option) *Client {
	t.Helper()
	c, err := New(base, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func checkRequest(t *testing.T, got recorded, method, path string, wantBody map[string]any) {
	t.Helper()
	if got.Method != method || got.Path != path {
		t.Errorf("request = %s %s, want %s %s", got.Method, got.Path, method, path)
	}
	if !reflect.DeepEqual(got.Body, wantBody) {
		t.Errorf("body = %v (%s), want %v", got.Body, got.RawBody, wantBody)
	}
	if wantBody != nil {
		if ct := got.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", ct)
		}
	} else if got.RawBody != "" {
		t.Errorf("unexpected body %q", got.RawBody)
	}
	if a := got.Header.Get("Accept"); a != "application/json" {
		t.Errorf("Accept = %q", a)
	}
}

func TestApply(t *testing.T) {
	f := newFake(t, 200, `{"success":true,"code":"SUCCESS","sessionId":"s-1","grantedAmount":4096,
		"remainingQuota":9007199254740000,"leaseExpiresAt":"2024-05-01T10:05:00Z","heartbeatIntervalSeconds":100}`)
	c := newClient(t, f.srv.URL+"/", WithAPIKey("k1"), WithAdminToken("adm"), WithUserAgent("ua/1"))
	resp, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "llm_tokens", ApplyAmount: 4096, ClientID: "svc", SessionID: "s-1", MinAmount: 1024})
	if err != nil {
		t.Fatal(err)
	}
	got := f.last()
	checkRequest(t, got, "POST", "/quota/apply", map[string]any{
		"resourceName": "llm_tokens", "applyAmount": 4096.0, "clientId": "svc", "sessionId": "s-1", "minAmount": 1024.0,
	})
	if k := got.Header.Get("X-API-Key"); k != "k1" {
		t.Errorf("X-API-Key = %q", k)
	}
	if a := got.Header.Get("Authorization"); a != "" {
		t.Errorf("client endpoint got Authorization %q", a)
	}
	if ua := got.Header.Get("User-Agent"); ua != "ua/1" {
		t.Errorf("User-Agent = %q", ua)
	}
	want := &ApplyResponse{SessionID: "s-1", GrantedAmount: 4096, RemainingQuota: 9007199254740000,
		LeaseExpiresAt: mustTime(t, "2024-05-01T10:05:00Z"), HeartbeatIntervalSeconds: 100}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("resp = %+v, want %+v", resp, want)
	}

	// Optional fields are omitted when zero.
	if _, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1}); err != nil {
		t.Fatal(err)
	}
	checkRequest(t, f.last(), "POST", "/quota/apply", map[string]any{"resourceName": "r", "applyAmount": 1.0})
}

func TestApplyOnABusinessLine(t *testing.T) {
	f := newFake(t, 200, `{"success":true,"code":"SUCCESS","sessionId":"s-2","grantedAmount":500,"remainingQuota":10,
		"leaseExpiresAt":"2024-05-01T10:05:00Z","heartbeatIntervalSeconds":30,
		"drawn":{"dedicated":300,"shared":100,"buffer":60,"grant":40},"quotaTight":true,"policyVersion":"v7"}`)
	c := newClient(t, f.srv.URL)
	no := false
	resp, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "llm", ApplyAmount: 500, BusinessLine: "search", Critical: &no, Continuation: true})
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, f.last(), "POST", "/quota/apply", map[string]any{
		"resourceName": "llm", "applyAmount": 500.0, "businessLine": "search", "critical": false, "continuation": true,
	})
	if resp.Drawn == nil || *resp.Drawn != (Drawn{Dedicated: 300, Shared: 100, Buffer: 60, Grant: 40}) || !resp.QuotaTight || resp.PolicyVersion != "v7" {
		t.Errorf("resp = %+v (drawn %+v)", resp, resp.Drawn)
	}
}

func TestHeartbeat(t *testing.T) {
	f := newFake(t, 200, `{"success":true,"code":"SUCCESS","sessionId":"s-2","status":"USING","leaseExpiresAt":"2024-05-01T10:10:00Z"}`)
	c := newClient(t, f.srv.URL, WithAPIKey("k1"))
	resp, err := c.Heartbeat(context.Background(), HeartbeatRequest{ResourceName: "r", SessionID: "s-2"})
	if err != nil {
		t.Fatal(err)
	}
	got := f.last()
	checkRequest(t, got, "POST", "/quota/heartbeat", map[string]any{"resourceName": "r", "sessionId": "s-2"})
	if got.Header.Get("X-API-Key") != "k1" {
		t.Error("missing X-API-Key")
	}
	want := &HeartbeatResponse{SessionID: "s-2", Status: SessionStatusUsing, LeaseExpiresAt: mustTime(t, "2024-05-01T10:10:00Z")}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("resp = %+v, want %+v", resp, want)
	}
}

func TestFinish(t *testing.T) {
	f := newFake(t, 200, `{"success":true,"code":"SUCCESS","sessionId":"s-3","grantedAmount":100,"chargedAmount":120,
		"refundedAmount":0,"overageAmount":20,"remainingQuota":-5}`)
	c := newClient(t, f.srv.URL)
	resp, err := c.Finish(context.Background(), FinishRequest{ResourceName: "r", SessionID: "s-3", ActualUsedAmount: 0})
	if err != nil {
		t.Fatal(err)
	}
	got := f.last()
	// actualUsedAmount 0 is sent, not omitted.
	checkRequest(t, got, "POST", "/quota/finish", map[string]any{"resourceName": "r", "sessionId": "s-3", "actualUsedAmount": 0.0})
	if _, ok := got.Header["X-Api-Key"]; ok {
		t.Error("X-API-Key sent without WithAPIKey")
	}
	if ua := got.Header.Get("User-Agent"); ua != DefaultUserAgent {
		t.Errorf("User-Agent = %q", ua)
	}
	want := &FinishResponse{SessionID: "s-3", GrantedAmount: 100, ChargedAmount: 120, RefundedAmount: 0, OverageAmount: 20, RemainingQuota: -5}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("resp = %+v, want %+v", resp, want)
	}
}

func TestStatus(t *testing.T) {
	f := newFake(t, 200, `{"success":true,"code":"SUCCESS","resourceName":"a.b-c","quotaType":"TOKENS","totalLimit":1000,
		"usedAmount":300,"reservedAmount":200,"remainingQuota":500,"activeSessions":2,
		"periodStart":"2024-05-01T00:00:00Z","nextResetAt":"2024-05-02T00:00:00Z"}`)
	c := newClient(t, f.srv.URL, WithAPIKey("k1"))
	st, err := c.Status(context.Background(), "a.b-c")
	if err != nil {
		t.Fatal(err)
	}
	got := f.last()
	checkRequest(t, got, "GET", "/quota/status", nil)
	if got.RawQuery != "resourceName=a.b-c" {
		t.Errorf("query = %q", got.RawQuery)
	}
	if got.Header.Get("X-API-Key") != "k1" {
		t.Error("missing X-API-Key")
	}
	next := mustTime(t, "2024-05-02T00:00:00Z")
	want := &QuotaStatus{ResourceName: "a.b-c", QuotaType: QuotaTypeTokens, TotalLimit: 1000, UsedAmount: 300, ReservedAmount: 200,
		RemainingQuota: 500, ActiveSessions: 2, PeriodStart: mustTime(t, "2024-05-01T00:00:00Z"), NextResetAt: &next}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("status = %+v, want %+v", st, want)
	}

	// nextResetAt null: the policy never resets.
	f.body = `{"success":true,"resourceName":"r","quotaType":"COUNT","totalLimit":1,"usedAmount":0,"reservedAmount":0,
		"remainingQuota":1,"activeSessions":0,"periodStart":"2024-05-01T00:00:00Z","nextResetAt":null}`
	st, err = c.Status(context.Background(), "r")
	if err != nil {
		t.Fatal(err)
	}
	if st.NextResetAt != nil {
		t.Errorf("NextResetAt = %v, want nil", st.NextResetAt)
	}
}

const policyJSON = `{"resourceName":"llm_tokens","quotaType":"TOKENS","totalLimit":1000000,"resetCron":"0 0 * * *",
	"timezone":"Asia/Shanghai","leakThresholdSeconds":300,"createdAt":"2024-05-01T00:00:00Z","updatedAt":"2024-05-02T00:00:00Z"}`

func wantPolicy(t *testing.T) Policy {
	return Policy{ResourceName: "llm_tokens", QuotaType: QuotaTypeTokens, TotalLimit: 1000000, ResetCron: "0 0 * * *",
		Timezone: "Asia/Shanghai", LeakThresholdSeconds: 300,
		CreatedAt: mustTime(t, "2024-05-01T00:00:00Z"), UpdatedAt: mustTime(t, "2024-05-02T00:00:00Z")}
}

func TestPutPolicy(t *testing.T) {
	for _, tc := range []struct {
		status  int
		created bool
	}{{201, true}, {200, false}} {
		f := newFake(t, tc.status, policyJSON)
		c := newClient(t, f.srv.URL, WithAdminToken("secret"), WithAPIKey("k1"))
		p, err := c.PutPolicy(context.Background(), PolicySpec{ResourceName: "llm_tokens", QuotaType: QuotaTypeTokens,
			TotalLimit: 1000000, ResetCron: "0 0 * * *", Timezone: "Asia/Shanghai", LeakThresholdSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		got := f.last()
		checkRequest(t, got, "PUT", "/admin/policies/llm_tokens", map[string]any{
			"quotaType": "TOKENS", "totalLimit": 1000000.0, "resetCron": "0 0 * * *", "timezone": "Asia/Shanghai", "leakThresholdSeconds": 300.0,
		})
		if a := got.Header.Get("Authorization"); a != "Bearer secret" {
			t.Errorf("Authorization = %q", a)
		}
		if k := got.Header.Get("X-API-Key"); k != "" {
			t.Errorf("admin endpoint got X-API-Key %q", k)
		}
		want := wantPolicy(t)
		want.Created = tc.created
		if !reflect.DeepEqual(*p, want) {
			t.Errorf("policy = %+v, want %+v", *p, want)
		}
	}

	// resetCron "" is sent (never resets); optional fields omitted.
	f := newFake(t, 200, policyJSON)
	c := newClient(t, f.srv.URL)
	if _, err := c.PutPolicy(context.Background(), PolicySpec{ResourceName: "r", QuotaType: QuotaTypeCount, TotalLimit: 5}); err != nil {
		t.Fatal(err)
	}
	checkRequest(t, f.last(), "PUT", "/admin/policies/r", map[string]any{"quotaType": "COUNT", "totalLimit": 5.0, "resetCron": ""})
	if _, err := c.PutPolicy(context.Background(), PolicySpec{QuotaType: QuotaTypeCount, TotalLimit: 5}); err == nil {
		t.Error("PutPolicy without a resource name: want error")
	}
}

func TestGetAndListPolicies(t *testing.T) {
	f := newFake(t, 200, policyJSON)
	c := newClient(t, f.srv.URL, WithAdminToken("secret"))
	p, err := c.GetPolicy(context.Background(), "llm_tokens")
	if err != nil {
		t.Fatal(err)
	}
	got := f.last()
	checkRequest(t, got, "GET", "/admin/policies/llm_tokens", nil)
	if got.Header.Get("Authorization") != "Bearer secret" {
		t.Error("missing bearer token")
	}
	if !reflect.DeepEqual(*p, wantPolicy(t)) {
		t.Errorf("policy = %+v", *p)
	}

	f.body = `{"policies":[` + policyJSON + `,` + policyJSON + `]}`
	ps, err := c.ListPolicies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, f.last(), "GET", "/admin/policies", nil)
	if len(ps) != 2 || !reflect.DeepEqual(ps[1], wantPolicy(t)) {
		t.Errorf("policies = %+v", ps)
	}

	f.body = `{"policies":[]}`
	ps, err = c.ListPolicies(context.Background())
	if err != nil || ps == nil || len(ps) != 0 {
		t.Errorf("empty list = %v, %v", ps, err)
	}
}

func TestHealthAndReady(t *testing.T) {
	f := newFake(t, 200, `{"status":"ok"}`)
	c := newClient(t, f.srv.URL, WithAPIKey("k"), WithAdminToken("t"))
	h, err := c.Healthz(context.Background())
	if err != nil || h.Status != "ok" {
		t.Fatalf("Healthz = %+v, %v", h, err)
	}
	got := f.last()
	checkRequest(t, got, "GET", "/healthz", nil)
	if got.Header.Get("X-API-Key") != "" || got.Header.Get("Authorization") != "" {
		t.Error("health check sent credentials")
	}

	f.status, f.body = 503, `{"status":"not ready","redis":"down"}`
	_, err = c.Readyz(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 503 || e.Message != "not ready" || e.Code != "" {
		t.Fatalf("Readyz err = %#v", err)
	}
	checkRequest(t, f.last(), "GET", "/readyz", nil)
}
