package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
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

func TestBasePathPrefix(t *testing.T) {
	f := newFake(t, 200, `{"policies":[]}`)
	c := newClient(t, f.srv.URL+"/qc/")
	if _, err := c.ListPolicies(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := f.last().Path; p != "/qc/admin/policies" {
		t.Errorf("path = %q", p)
	}
	if c.BaseURL() != f.srv.URL+"/qc" {
		t.Errorf("BaseURL = %q", c.BaseURL())
	}
}

func TestResourceNameEscaped(t *testing.T) {
	f := newFake(t, 200, policyJSON)
	c := newClient(t, f.srv.URL)
	if _, err := c.GetPolicy(context.Background(), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if p := f.last().EscapedPath; p != "/admin/policies/a%2Fb%20c" {
		t.Errorf("escaped path = %q, want one segment", p)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "http://h/?x=1", "://bad"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q): want error", u)
		}
	}
	if _, err := New("http://h", WithHTTPClient(nil)); err == nil {
		t.Error("WithHTTPClient(nil): want error")
	}
}

func TestDefaultTransportPooled(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	tr, ok := c.HTTPClient().Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport = %T", c.HTTPClient().Transport)
	}
	if tr.MaxIdleConnsPerHost < 200 {
		t.Errorf("MaxIdleConnsPerHost = %d, want >= 200", tr.MaxIdleConnsPerHost)
	}
	hc := &http.Client{}
	c = newClient(t, "http://127.0.0.1:1", WithHTTPClient(hc))
	if c.HTTPClient() != hc {
		t.Error("WithHTTPClient ignored")
	}
}

func TestErrorCodes(t *testing.T) {
	sentinels := []struct {
		status int
		code   string
		target *Error
	}{
		{400, "INVALID_ARGUMENT", ErrInvalidArgument},
		{401, "UNAUTHENTICATED", ErrUnauthenticated},
		{403, "PERMISSION_DENIED", ErrPermissionDenied},
		{404, "RESOURCE_NOT_FOUND", ErrResourceNotFound},
		{404, "SESSION_NOT_FOUND", ErrSessionNotFound},
		{404, "NOT_FOUND", ErrNotFound},
		{405, "METHOD_NOT_ALLOWED", ErrMethodNotAllowed},
		{409, "SESSION_NOT_ACTIVE", ErrSessionNotActive},
		{409, "SESSION_CONFLICT", ErrSessionConflict},
		{409, "CONFLICT", ErrConflict},
		{409, "RECONCILE_SKIPPED", ErrReconcileSkipped},
		{409, "POLICY_IN_USE", ErrPolicyInUse},
		{501, "NOT_IMPLEMENTED", ErrNotImplemented},
		{413, "PAYLOAD_TOO_LARGE", ErrPayloadTooLarge},
		{408, "REQUEST_TIMEOUT", ErrRequestTimeout},
		{415, "UNSUPPORTED_MEDIA_TYPE", ErrUnsupportedMediaType},
		{429, "QUOTA_EXHAUSTED", ErrQuotaExhausted},
		{503, "BACKEND_UNAVAILABLE", ErrBackendUnavailable},
		{503, "CIRCUIT_BREAKER_OPEN", ErrCircuitOpen},
		{500, "INTERNAL_ERROR", ErrInternal},
	}
	for _, tc := range sentinels {
		t.Run(tc.code, func(t *testing.T) {
			f := newFake(t, tc.status, `{"success":false,"code":"`+tc.code+`","message":"m `+tc.code+`"}`)
			c := newClient(t, f.srv.URL)
			_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1})
			if !errors.Is(err, tc.target) {
				t.Fatalf("err = %v, want errors.Is %s", err, tc.code)
			}
			for _, other := range sentinels {
				if other.code != tc.code && errors.Is(err, other.target) {
					t.Errorf("err also matches %s", other.code)
				}
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %T is not a *Error", err)
			}
			if e.StatusCode != tc.status || e.Code != tc.code || e.Message != "m "+tc.code {
				t.Errorf("error = %+v", e)
			}
			if !strings.Contains(err.Error(), tc.code) {
				t.Errorf("Error() = %q lacks the code", err.Error())
			}
		})
	}
}

func TestQuotaExhaustedDetails(t *testing.T) {
	f := newFake(t, 429, `{"success":false,"code":"QUOTA_EXHAUSTED","message":"not enough quota","remainingQuota":42}`)
	f.header.Set("Retry-After", "3600")
	c := newClient(t, f.srv.URL)
	_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 100})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrQuotaExhausted) {
		t.Fatalf("err = %v", err)
	}
	if e.RetryAfter != time.Hour {
		t.Errorf("RetryAfter = %v, want 1h", e.RetryAfter)
	}
	if e.RemainingQuota == nil || *e.RemainingQuota != 42 {
		t.Errorf("RemainingQuota = %v", e.RemainingQuota)
	}

	if e.Reason != "" || !e.NextResetAt.IsZero() {
		t.Errorf("Reason %q, NextResetAt %v: the server sent neither", e.Reason, e.NextResetAt)
	}

	// A business line's refusal: reason and nextResetAt.
	f.body = `{"success":false,"code":"QUOTA_EXHAUSTED","message":"x","remainingQuota":7,"reason":"WATERMARK","nextResetAt":"2024-05-02T00:00:00Z"}`
	_, err = c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 100, BusinessLine: "search"})
	if !errors.As(err, &e) || e.Reason != ReasonWatermark || !e.NextResetAt.Equal(mustTime(t, "2024-05-02T00:00:00Z")) {
		t.Errorf("err = %+v, want reason WATERMARK and the next reset", e)
	}

	// No Retry-After (never resets) and remainingQuota 0.
	f.header.Del("Retry-After")
	f.body = `{"success":false,"code":"QUOTA_EXHAUSTED","message":"x","remainingQuota":0}`
	_, err = c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 100})
	if !errors.As(err, &e) || e.RetryAfter != 0 || e.RemainingQuota == nil || *e.RemainingQuota != 0 {
		t.Errorf("err = %+v", e)
	}
}

func TestSessionNotActiveStatus(t *testing.T) {
	f := newFake(t, 409, `{"success":false,"code":"SESSION_NOT_ACTIVE","message":"session s is LEAKED","status":"LEAKED"}`)
	c := newClient(t, f.srv.URL)
	_, err := c.Heartbeat(context.Background(), HeartbeatRequest{ResourceName: "r", SessionID: "s"})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrSessionNotActive) || e.SessionStatus != "LEAKED" {
		t.Fatalf("err = %#v", err)
	}
	if e.RemainingQuota != nil {
		t.Errorf("RemainingQuota = %v, want nil", *e.RemainingQuota)
	}
}

func TestCircuitOpenRetryAfter(t *testing.T) {
	f := newFake(t, 503, `{"success":false,"code":"CIRCUIT_BREAKER_OPEN","message":"redis breaker open"}`)
	f.header.Set("Retry-After", "5")
	c := newClient(t, f.srv.URL)
	_, err := c.Finish(context.Background(), FinishRequest{ResourceName: "r", SessionID: "s", ActualUsedAmount: 1})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrCircuitOpen) || e.RetryAfter != 5*time.Second {
		t.Fatalf("err = %#v", err)
	}
	if errors.Is(err, ErrBackendUnavailable) {
		t.Error("CIRCUIT_BREAKER_OPEN matched ErrBackendUnavailable")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"1.5", 0},
		{"soon", 0},
		{"Wed, 01 May 2024 12:00:30 GMT", 30 * time.Second},
		{"Wed, 01 May 2024 11:00:00 GMT", 0}, // in the past
		{"99999999999999999999", 0},          // overflows int64: malformed
		{"9223372036854775807", time.Duration(1<<63-1) / time.Second * time.Second},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	f := newFake(t, 502, "<html><body>Bad Gateway</body></html>\n")
	f.header.Set("Content-Type", "text/html")
	c := newClient(t, f.srv.URL)
	_, err := c.Status(context.Background(), "r")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err %T %v is not a *Error", err, err)
	}
	if e.StatusCode != 502 || e.Code != "" || e.Message != "<html><body>Bad Gateway</body></html>" {
		t.Errorf("error = %+v", e)
	}
	for _, s := range []*Error{ErrInternal, ErrBackendUnavailable, ErrInvalidArgument} {
		if errors.Is(err, s) {
			t.Errorf("code-less error matched %s", s.Code)
		}
	}

	// Empty body: the status text.
	f.status, f.body = 500, ""
	_, err = c.Status(context.Background(), "r")
	if !errors.As(err, &e) || e.StatusCode != 500 || e.Message != "Internal Server Error" {
		t.Errorf("error = %+v", e)
	}

	// JSON, but not an error object.
	f.status, f.body = 404, `[1,2]`
	_, err = c.Status(context.Background(), "r")
	if !errors.As(err, &e) || e.StatusCode != 404 || e.Code != "" || e.Message != "[1,2]" {
		t.Errorf("error = %+v", e)
	}

	// A long body is cut.
	f.status, f.body = 500, strings.Repeat("é", 1000)
	_, err = c.Status(context.Background(), "r")
	if !errors.As(err, &e) || len(e.Message) > 210 || !strings.HasSuffix(e.Message, "…") {
		t.Errorf("message len %d: %q", len(e.Message), e.Message)
	}
}

func TestBadSuccessBody(t *testing.T) {
	f := newFake(t, 200, "not json")
	c := newClient(t, f.srv.URL)
	_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1})
	if err == nil {
		t.Fatal("want a decode error")
	}
	var e *Error
	if errors.As(err, &e) {
		t.Errorf("decode error should not be a *Error: %v", err)
	}
}

func TestTransportErrorAndTimeout(t *testing.T) {
	// Connection refused: not a *Error.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := newClient(t, url)
	_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1})
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("err = %v", err)
	}

	// WithTimeout bounds a slow server.
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(block)
	c = newClient(t, slow.URL, WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err = c.Healthz(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}

	// A cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Healthz(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want canceled", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	f := newFake(t, 200, `{"sessionId":"s","grantedAmount":1,"remainingQuota":1,"leaseExpiresAt":"2024-05-01T10:05:00Z","heartbeatIntervalSeconds":1}`)
	c := newClient(t, f.srv.URL)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
