package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// Secrets of the auth tests: long enough for the config rules, and unlike
// anything else in a request or a log line.
const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-fedcba9876543210xyz"
	keyA       = "key-of-client-a-0123456789"  // client-a: res-a and shared
	keyB       = "key-of-client-b-9876543210"  // client-b: every resource
	keyUnknown = "key-nobody-has-000000000000" // configured nowhere
)

var authSecrets = []string{aliceToken, bobToken, keyA, keyB, keyUnknown}

// authEnv is a Server on miniredis and an in-memory SQLite ledger (which
// is also its audit log), with its log lines observed at debug level.
type authEnv struct {
	url   string
	store *mysqlstore.Store
	logs  *observer.ObservedLogs
}

type authOpts struct {
	auth  AuthConfig
	audit quota.AuditLog // nil: the SQLite store
}

func newAuthEnv(t *testing.T, o authOpts) *authEnv {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := mysqlstore.OpenSQLite(t.Context(), ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if o.audit == nil {
		o.audit = st
	}
	svc := quota.NewService(redisstore.New(rdb), st, st, &period.Scheduler{}, quota.Options{Audit: o.audit})
	core, logs := observer.New(zapcore.DebugLevel)
	srv := New(Deps{Service: svc, Logger: zap.New(core), Auth: o.auth})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &authEnv{url: ts.URL, store: st, logs: logs}
}

// fullAuth has two admin tokens and two API keys: client-a may use res-a
// and shared, client-b every resource.
func fullAuth() AuthConfig {
	return AuthConfig{
		AdminTokens: []AdminToken{{Name: "alice", Token: aliceToken}, {Name: "bob", Token: bobToken}},
		APIKeys: []APIKey{
			{Key: keyA, ClientID: "client-a", Resources: []string{"res-a", "shared"}},
			{Key: keyB, ClientID: "client-b", AllResources: true},
		},
		Production: true,
	}
}

type authReply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// call sends method path with body (JSON text, "" for none) and headers
// given as name, value pairs.
func (e *authEnv) call(t *testing.T, method, path, body string, headers ...string) authReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := authReply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if bytes.HasPrefix(raw, []byte("{")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&r.body); err != nil {
			t.Fatalf("%s %s: bad JSON %s: %v", method, path, raw, err)
		}
	}
	return r
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }
func apiKey(key string) []string   { return []string{"X-API-Key", key} }

// want checks the status and, for errors, the JSON error body's code.
func (r authReply) want(t *testing.T, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if code == "" {
		return
	}
	if r.body["code"] != code || r.body["success"] != false || r.body["message"] == "" {
		t.Fatalf("body %s, want {success:false, code:%s, message}", r.raw, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

func (r authReply) num(t *testing.T, field string) int64 {
	t.Helper()
	n, ok := r.body[field].(json.Number)
	if !ok {
		t.Fatalf("no number %s in %s", field, r.raw)
	}
	v, _ := n.Int64()
	return v
}

const policyBody = `{"quotaType":"TOKENS","totalLimit":1000}`

func TestAdminEndpointsNeedABearerToken(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	tests := []struct {
		name    string
		headers []string
		want    int
	}{
		{"no Authorization header is 401", nil, http.StatusUnauthorized},
		{"a wrong token is 401", bearer("wrong-token-0123456789abcdef"), http.StatusUnauthorized},
		{"a prefix of a right token is 401", bearer(aliceToken[:len(aliceToken)-1]), http.StatusUnauthorized},
		{"a right token with a suffix is 401", bearer(aliceToken + "x"), http.StatusUnauthorized},
		{"an empty bearer token is 401", []string{"Authorization", "Bearer "}, http.StatusUnauthorized},
		{"another scheme is 401", []string{"Authorization", "Basic " + aliceToken}, http.StatusUnauthorized},
		{"the token without a scheme is 401", []string{"Authorization", aliceToken}, http.StatusUnauthorized},
		{"two Authorization headers are 401", append(bearer(aliceToken), bearer(bobToken)...), http.StatusUnauthorized},
		{"an API key is no admin token", bearer(keyB), http.StatusUnauthorized},
		{"the first token is 200", bearer(aliceToken), http.StatusOK},
		{"the second token is 200", bearer(bobToken), http.StatusOK},
		{"the scheme is case-insensitive", []string{"Authorization", "bearer " + aliceToken}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/admin/policies", "/admin/audit"} {
				r := e.call(t, http.MethodGet, path, "", tt.headers...)
				if tt.want == http.StatusOK {
					r.want(t, http.StatusOK, "")
					continue
				}
				r.want(t, http.StatusUnauthorized, CodeUnauthenticated)
				if c := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(c, "Bearer") {
					t.Fatalf("%s: WWW-Authenticate %q, want a Bearer challenge", path, c)
				}
			}
		})
	}
	t.Run("a PUT without a token changes nothing", func(t *testing.T) {
		e.call(t, http.MethodPut, "/admin/policies/res-a", policyBody).want(t, http.StatusUnauthorized, CodeUnauthenticated)
		e.call(t, http.MethodGet, "/admin/policies/res-a", "", bearer(aliceToken)...).want(t, http.StatusNotFound, CodeResourceNotFound)
	})
	t.Run("health and metrics need no token", func(t *testing.T) {
		e.call(t, http.MethodGet, "/healthz", "").want(t, http.StatusOK, "")
	})
}

func TestAdminWithoutTokens(t *testing.T) {
	t.Run("production refuses every admin call with 403", func(t *testing.T) {
		e := newAuthEnv(t, authOpts{auth: AuthConfig{Production: true}})
		for _, rq := range []struct{ method, path, body string }{
			{http.MethodGet, "/admin/policies", ""},
			{http.MethodGet, "/admin/policies/res-a", ""},
			{http.MethodPut, "/admin/policies/res-a", policyBody},
			{http.MethodGet, "/admin/audit", ""},
		} {
			r := e.call(t, rq.method, rq.path, rq.body, bearer(aliceToken)...)
			r.want(t, http.StatusForbidden, CodePermissionDenied)
			if r.body["message"] != "admin endpoints are disabled: set QC_ADMIN_TOKENS" {
				t.Fatalf("%s %s: message %v", rq.method, rq.path, r.body["message"])
			}
		}
		// The client endpoints stay open: no API keys are configured.
		e.call(t, http.MethodGet, "/quota/status?resourceName=res-a", "").want(t, http.StatusNotFound, CodeResourceNotFound)
	})
	t.Run("dev mode leaves admin open and audits the change as anonymous", func(t *testing.T) {
		e := newAuthEnv(t, authOpts{})
		e.call(t, http.MethodPut, "/admin/policies/res-a", policyBody).want(t, http.StatusCreated, "")
		r := e.call(t, http.MethodGet, "/admin/audit", "")
		r.want(t, http.StatusOK, "")
		entries := auditEntries(t, r)
		if len(entries) != 1 || entries[0].Actor != quota.AnonymousActor {
			t.Fatalf("entries %+v, want one by %s", entries, quota.AnonymousActor)
		}
	})
}

// setupPolicies creates res-a, res-b and shared (limit 1000 each).
func (e *authEnv) setupPolicies(t *testing.T) {
	t.Helper()
	for _, name := range []string{"res-a", "res-b", "shared"} {
		e.call(t, http.MethodPut, "/admin/policies/"+name, policyBody, bearer(aliceToken)...).want(t, http.StatusCreated, "")
	}
}

func TestClientEndpointsNeedAKnownAPIKey(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	e.setupPolicies(t)
	calls := []struct{ name, method, path, body string }{
		{"apply", http.MethodPost, "/quota/apply", `{"resourceName":"res-a","applyAmount":1}`},
		{"heartbeat", http.MethodPost, "/quota/heartbeat", `{"resourceName":"res-a","sessionId":"s-1"}`},
		{"finish", http.MethodPost, "/quota/finish", `{"resourceName":"res-a","sessionId":"s-1","actualUsedAmount":1}`},
		{"status", http.MethodGet, "/quota/status?resourceName=res-a", ""},
	}
	tests := []struct {
		name    string
		headers []string
	}{
		{"a missing key is 401", nil},
		{"an empty key is 401", apiKey("")},
		{"an unknown key is 401", apiKey(keyUnknown)},
		{"an admin token is no API key", apiKey(aliceToken)},
		{"two keys are 401", append(apiKey(keyA), apiKey(keyB)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range calls {
				r := e.call(t, c.method, c.path, c.body, tt.headers...)
				r.want(t, http.StatusUnauthorized, CodeUnauthenticated)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Fatalf("%s: no WWW-Authenticate challenge", c.name)
				}
			}
		})
	}
	if st := e.call(t, http.MethodGet, "/quota/status?resourceName=res-a", "", apiKey(keyA)...); st.num(t, "reservedAmount") != 0 {
		t.Fatalf("refused calls changed the balance: %s", st.raw)
	}
}

func TestAPIKeyMayUseOnlyItsResources(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	e.setupPolicies(t)
	// A session of client-b on res-b, which client-a may not use.
	a := e.call(t, http.MethodPost, "/quota/apply", `{"resourceName":"res-b","applyAmount":10,"sessionId":"b-1"}`, apiKey(keyB)...)
	a.want(t, http.StatusOK, "")

	tests := []struct{ name, method, path, body string }{
		{"apply", http.MethodPost, "/quota/apply", `{"resourceName":"res-b","applyAmount":1}`},
		{"heartbeat", http.MethodPost, "/quota/heartbeat", `{"resourceName":"res-b","sessionId":"b-1"}`},
		{"finish", http.MethodPost, "/quota/finish", `{"resourceName":"res-b","sessionId":"b-1","actualUsedAmount":1}`},
		{"status", http.MethodGet, "/quota/status?resourceName=res-b", ""},
		{"apply to a resource without a policy", http.MethodPost, "/quota/apply", `{"resourceName":"nope","applyAmount":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name+" on another resource is 403", func(t *testing.T) {
			e.call(t, tt.method, tt.path, tt.body, apiKey(keyA)...).want(t, http.StatusForbidden, CodePermissionDenied)
		})
	}
	t.Run("a malformed resource name is 400, not 403", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/apply", `{"resourceName":"Res B","applyAmount":1}`, apiKey(keyA)...).
			want(t, http.StatusBadRequest, CodeInvalidArgument)
	})
	t.Run("the refused calls changed nothing", func(t *testing.T) {
		st := e.call(t, http.MethodGet, "/quota/status?resourceName=res-b", "", apiKey(keyB)...)
		st.want(t, http.StatusOK, "")
		if st.num(t, "reservedAmount") != 10 || st.num(t, "usedAmount") != 0 || st.num(t, "activeSessions") != 1 {
			t.Fatalf("status %s, want 10 reserved by one session", st.raw)
		}
	})
	t.Run("a key for every resource may use any", func(t *testing.T) {
		e.call(t, http.MethodGet, "/quota/status?resourceName=res-a", "", apiKey(keyB)...).want(t, http.StatusOK, "")
	})
}

func TestAPIKeyFixesTheClientID(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	e.setupPolicies(t)
	t.Run("another clientId in the body is 403", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/apply", `{"resourceName":"res-a","applyAmount":1,"clientId":"client-b"}`, apiKey(keyA)...).
			want(t, http.StatusForbidden, CodePermissionDenied)
	})
	for _, body := range []string{
		`{"resourceName":"res-a","applyAmount":1,"sessionId":"empty-client"}`,
		`{"resourceName":"res-a","applyAmount":1,"sessionId":"same-client","clientId":"client-a"}`,
	} {
		var in struct{ SessionID string }
		_ = json.Unmarshal([]byte(body), &in)
		t.Run("session "+in.SessionID+" is recorded as the key's client", func(t *testing.T) {
			e.call(t, http.MethodPost, "/quota/apply", body, apiKey(keyA)...).want(t, http.StatusOK, "")
			row, err := e.store.Session(t.Context(), in.SessionID)
			if err != nil || row.ClientID != "client-a" {
				t.Fatalf("ledger row %+v, %v; want clientId client-a", row, err)
			}
		})
	}
}

func TestAnotherClientsSessionIsNotFound(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	e.setupPolicies(t)
	e.call(t, http.MethodPost, "/quota/apply", `{"resourceName":"shared","applyAmount":100,"sessionId":"a-1"}`, apiKey(keyA)...).
		want(t, http.StatusOK, "")
	statusOf := func() authReply {
		r := e.call(t, http.MethodGet, "/quota/status?resourceName=shared", "", apiKey(keyA)...)
		r.want(t, http.StatusOK, "")
		return r
	}
	before := statusOf()

	t.Run("heartbeat with another client's key is 404", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"shared","sessionId":"a-1"}`, apiKey(keyB)...).
			want(t, http.StatusNotFound, CodeSessionNotFound)
	})
	t.Run("finish with another client's key is 404", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/finish", `{"resourceName":"shared","sessionId":"a-1","actualUsedAmount":0}`, apiKey(keyB)...).
			want(t, http.StatusNotFound, CodeSessionNotFound)
	})
	t.Run("naming the other client in the body is 403", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"shared","sessionId":"a-1","clientId":"client-a"}`, apiKey(keyB)...).
			want(t, http.StatusForbidden, CodePermissionDenied)
	})
	t.Run("the session is unchanged", func(t *testing.T) {
		after := statusOf()
		for _, f := range []string{"reservedAmount", "usedAmount", "remainingQuota", "activeSessions"} {
			if after.num(t, f) != before.num(t, f) {
				t.Errorf("%s went from %d to %d", f, before.num(t, f), after.num(t, f))
			}
		}
		if after.num(t, "reservedAmount") != 100 {
			t.Fatalf("reserved %d, want 100", after.num(t, "reservedAmount"))
		}
		row, err := e.store.Session(t.Context(), "a-1")
		if err != nil || row.Status != quota.StatusUsing || row.ClientID != "client-a" {
			t.Fatalf("ledger row %+v, %v; want USING of client-a", row, err)
		}
	})
	t.Run("its own client still heartbeats and finishes it", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"shared","sessionId":"a-1"}`, apiKey(keyA)...).
			want(t, http.StatusOK, "")
		f := e.call(t, http.MethodPost, "/quota/finish", `{"resourceName":"shared","sessionId":"a-1","actualUsedAmount":40}`, apiKey(keyA)...)
		f.want(t, http.StatusOK, "")
		if f.num(t, "chargedAmount") != 40 || f.num(t, "refundedAmount") != 60 {
			t.Fatalf("finish %s", f.raw)
		}
	})
	t.Run("a finished session of another client is not found either", func(t *testing.T) {
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"shared","sessionId":"a-1"}`, apiKey(keyB)...).
			want(t, http.StatusNotFound, CodeSessionNotFound)
		e.call(t, http.MethodPost, "/quota/finish", `{"resourceName":"shared","sessionId":"a-1","actualUsedAmount":40}`, apiKey(keyB)...).
			want(t, http.StatusNotFound, CodeSessionNotFound)
	})
	// Issue 11 §3.5: the id is the client's own (before, 409 told client-b
	// that client-a's session existed, and kept client-b from the id).
	t.Run("reusing its sessionId on apply is a session of its own", func(t *testing.T) {
		a := e.call(t, http.MethodPost, "/quota/apply", `{"resourceName":"shared","applyAmount":30,"sessionId":"a-1"}`, apiKey(keyB)...)
		a.want(t, http.StatusOK, "")
		if a.num(t, "grantedAmount") != 30 || a.num(t, "remainingQuota") != 1000-40-30 {
			t.Fatalf("apply %s", a.raw)
		}
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"shared","sessionId":"a-1"}`, apiKey(keyB)...).
			want(t, http.StatusOK, "")
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"shared","sessionId":"a-1"}`, apiKey(keyA)...).
			want(t, http.StatusConflict, CodeSessionNotActive) // client-a's is finished
		f := e.call(t, http.MethodPost, "/quota/finish", `{"resourceName":"shared","sessionId":"a-1","actualUsedAmount":5}`, apiKey(keyB)...)
		f.want(t, http.StatusOK, "")
		if f.num(t, "grantedAmount") != 30 || f.num(t, "chargedAmount") != 5 || f.raw == "" {
			t.Fatalf("finish %s", f.raw)
		}
		if st := statusOf(); st.num(t, "usedAmount") != 45 || st.num(t, "reservedAmount") != 0 {
			t.Fatalf("status %s, want 40 + 5 used", st.raw)
		}
		for id, want := range map[string]string{"a-1": "client-a", quota.ScopedSessionID("shared", "client-b", "a-1"): "client-b"} {
			if row, err := e.store.Session(t.Context(), id); err != nil || row.ClientID != want || row.Status != quota.StatusFinished {
				t.Fatalf("ledger row %s: %+v, %v; want %s's, FINISHED", id, row, err, want)
			}
		}
	})
}

func TestSecretsNeverReachTheLog(t *testing.T) {
	e := newAuthEnv(t, authOpts{auth: fullAuth()})
	e.setupPolicies(t)
	for _, h := range [][]string{bearer(aliceToken), bearer(bobToken), bearer(keyUnknown), bearer(keyA), nil} {
		e.call(t, http.MethodGet, "/admin/policies", "", h...)
		e.call(t, http.MethodPut, "/admin/policies/res-a", policyBody, h...)
		e.call(t, http.MethodGet, "/admin/audit?limit=x", "", h...)
	}
	for _, h := range [][]string{apiKey(keyA), apiKey(keyB), apiKey(keyUnknown), apiKey(aliceToken), nil} {
		e.call(t, http.MethodPost, "/quota/apply", `{"resourceName":"res-b","applyAmount":1,"clientId":"x"}`, h...)
		e.call(t, http.MethodPost, "/quota/heartbeat", `{"resourceName":"res-a","sessionId":"nope"}`, h...)
		e.call(t, http.MethodPost, "/quota/finish", `{"resourceName":"shared","sessionId":"nope","actualUsedAmount":1}`, h...)
		e.call(t, http.MethodGet, "/quota/status?resourceName=res-b", "", h...)
	}
	entries := e.logs.All()
	if len(entries) == 0 {
		t.Fatal("no log lines observed: the test would prove nothing")
	}
	for _, en := range entries {
		enc := zapcore.NewMapObjectEncoder()
		for _, f := range en.Context {
			f.AddTo(enc)
		}
		line := en.Message + " " + fmt.Sprint(enc.Fields)
		for _, secret := range authSecrets {
			if strings.Contains(line, secret) {
				t.Fatalf("log line carries a secret: %s", line)
			}
		}
	}
}
