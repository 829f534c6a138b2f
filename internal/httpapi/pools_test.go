package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// newPoolsHarness is newHarness with the pools: the admin endpoints and
// the Service's PoolSource, wired as app.Serve does.
func newPoolsHarness(t *testing.T, keys ...httpapi.APIKey) (*testAPI, *mysqlstore.Store) {
	t.Helper()
	a, sql, _ := newPoolsHarnessOn(t, miniredis.RunT(t), keys...)
	return a, sql
}

// newPoolsHarnessOn is newPoolsHarness on a given miniredis (a test can
// then lose Redis' data with FlushAll).
func newPoolsHarnessOn(t *testing.T, mr *miniredis.Miniredis, keys ...httpapi.APIKey) (*testAPI, *mysqlstore.Store, *miniredis.Miniredis) {
	t.Helper()
	sql := newSQLite(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rs := redisstore.New(rdb)
	sched := &period.Scheduler{}
	admin := poolctl.NewAdmin(sql, rs, sched, nil)
	svc := quota.NewService(rs, sql, sql, sched, quota.Options{Pools: poolctl.NewSource(admin, sql, rs, time.Millisecond)})
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(prometheus.NewRegistry()),
		Pools: admin, Auth: httpapi.AuthConfig{APIKeys: keys}})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{URL: ts.URL, srv: srv}, sql, mr
}

func TestPoolsAdminEndpoints(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	r := a.do(t, request{method: "PUT", path: base + "/lines/search", body: `{"tier":"CORE","weight":3}`})
	if r.status != http.StatusCreated {
		t.Fatalf("create line: %d %s", r.status, r.raw)
	}
	r = a.do(t, request{method: "PUT", path: base + "/lines/search", body: `{"tier":"CORE","weight":2}`})
	if r.status != http.StatusOK {
		t.Fatalf("update line: %d %s", r.status, r.raw)
	}
	a.mustOK(t, request{method: "PUT", path: base + "/lines/ads", body: `{"tier":"EXPLORE","dedicated":1000}`})
	r = a.get(t, base+"/lines")
	if r.status != 200 || num(t, r, "shared") != 60000 || num(t, r, "buffer") != 10000 || num(t, r, "dedicated") != 30000 {
		t.Fatalf("lines: %d %s", r.status, r.raw)
	}
	lines := r.body["lines"].([]any)
	if len(lines) != 2 || lines[1].(map[string]any)["dedicated"].(interface{ String() string }).String() != "29000" {
		t.Fatalf("lines: %s", r.raw)
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r = a.post(t, base+"/grants", `{"amount":500,"businessLine":"search","expiresAt":"`+exp+`","reason":"launch"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("grant: %d %s", r.status, r.raw)
	}
	id := r.body["grant"].(map[string]any)["id"].(string)
	if r := a.get(t, base+"/grants"); r.status != 200 || len(r.body["grants"].([]any)) != 1 {
		t.Fatalf("grants: %d %s", r.status, r.raw)
	}
	a.mustOK(t, request{method: "DELETE", path: base + "/grants/" + id})
	if r := a.post(t, base+"/buffer/release", `{"amount":400,"businessLine":"ads","reason":"promo"}`); r.status != http.StatusCreated {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if r := a.get(t, base+"/reclaims"); r.status != 200 {
		t.Fatalf("reclaims: %d %s", r.status, r.raw)
	}
	if r := a.get(t, base+"/pool-events"); r.status != 200 || len(r.body["events"].([]any)) != 1 {
		t.Fatalf("events: %d %s", r.status, r.raw)
	}
	a.mustOK(t, request{method: "PUT", path: base + "/pools", body: `{"sharedPercent":50,"dedicatedPercent":40,"bufferPercent":10,"borrowLimitPercent":300}`})
	a.mustOK(t, request{method: "DELETE", path: base + "/lines/ads"})
}

func TestPoolsAdminBadInputIs4xxAndChangesNothing(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/search", body: `{"tier":"CORE","weight":3}`})
	before := a.get(t, "/admin/policies/llm/lines").raw
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	base := "/admin/policies/llm"
	tests := []struct {
		name   string
		rq     request
		status int
	}{
		{"unknown tier", request{method: "PUT", path: base + "/lines/x", body: `{"tier":"GOLD","weight":1}`}, 400},
		{"bad line name", request{method: "PUT", path: base + "/lines/X!", body: `{"tier":"CORE","weight":1}`}, 400},
		{"weight too big", request{method: "PUT", path: base + "/lines/x", body: `{"tier":"CORE","weight":1001}`}, 400},
		{"negative dedicated", request{method: "PUT", path: base + "/lines/x", body: `{"tier":"CORE","dedicated":-1}`}, 400},
		{"dedicated above the pool", request{method: "PUT", path: base + "/lines/x", body: `{"tier":"CORE","dedicated":30001}`}, 400},
		{"unknown field", request{method: "PUT", path: base + "/lines/x", body: `{"tier":"CORE","weigth":1}`}, 400},
		{"unknown resource", request{method: "PUT", path: "/admin/policies/nope/lines/x", body: `{"tier":"CORE","weight":1}`}, 404},
		{"shares not summing to 100", request{method: "PUT", path: base + "/pools", body: `{"sharedPercent":70,"dedicatedPercent":30,"bufferPercent":10}`}, 400},
		{"unknown elasticity", request{method: "PUT", path: base + "/pools", body: `{"elasticity":"SOMETIMES"}`}, 400},
		{"negative grant", request{method: "POST", path: base + "/grants", body: `{"amount":-5,"expiresAt":"` + exp + `"}`}, 400},
		{"grant in the past", request{method: "POST", path: base + "/grants", body: `{"amount":5,"expiresAt":"` + past + `"}`}, 400},
		{"grant ending before it starts", request{method: "POST", path: base + "/grants", body: `{"amount":5,"effectiveAt":"` + exp + `","expiresAt":"` + past + `"}`}, 400},
		{"grant without expiry", request{method: "POST", path: base + "/grants", body: `{"amount":5}`}, 400},
		{"grant to an unknown line", request{method: "POST", path: base + "/grants", body: `{"amount":5,"businessLine":"zz","expiresAt":"` + exp + `"}`}, 400},
		{"grant with a bad time", request{method: "POST", path: base + "/grants", body: `{"amount":5,"expiresAt":"tomorrow"}`}, 400},
		{"release above the buffer", request{method: "POST", path: base + "/buffer/release", body: `{"amount":10001}`}, 409},
		{"delete an unknown line", request{method: "DELETE", path: base + "/lines/zz"}, 404},
		{"void an unknown grant", request{method: "DELETE", path: base + "/grants/g0"}, 404},
		{"confirm an unknown reclaim", request{method: "POST", path: base + "/reclaims/r9/confirm"}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.do(t, tt.rq)
			if r.status != tt.status || r.body["success"] != false || r.body["message"] == "" {
				t.Fatalf("%d %s, want %d with an error body", r.status, r.raw, tt.status)
			}
		})
	}
	if after := a.get(t, "/admin/policies/llm/lines").raw; string(after) != string(before) {
		t.Fatalf("bad input changed the pools:\n%s\n%s", before, after)
	}
	if r := a.get(t, base+"/grants"); len(r.body["grants"].([]any)) != 0 {
		t.Fatalf("bad input recorded grants: %s", r.raw)
	}
}

func drawnOfReply(t *testing.T, r reply) map[string]any {
	t.Helper()
	d, ok := r.body["drawn"].(map[string]any)
	if !ok {
		t.Fatalf("no drawn in %s", r.raw)
	}
	return d
}

func TestApplyWithBusinessLines(t *testing.T) {
	a, sql := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.putPolicy(t, "plain", `{"quotaType":"TOKENS","totalLimit":100}`)
	// shared 600, buffer 100; a (CORE) 200 dedicated + 100 borrow; b (EXPLORE) 100 + 50.
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":2}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})

	for _, tt := range []struct{ name, body string }{
		{"no line on a resource with lines", `{"resourceName":"llm","applyAmount":10}`},
		{"unknown line", `{"resourceName":"llm","applyAmount":10,"businessLine":"zz"}`},
		{"bad line name", `{"resourceName":"llm","applyAmount":10,"businessLine":"A B"}`},
		{"line on a resource without lines", `{"resourceName":"plain","applyAmount":10,"businessLine":"a"}`},
		{"critical not a boolean", `{"resourceName":"llm","applyAmount":10,"businessLine":"a","critical":"yes"}`},
	} {
		if r := a.post(t, "/quota/apply", tt.body); r.status != 400 {
			t.Fatalf("%s: %d %s", tt.name, r.status, r.raw)
		}
	}
	r := a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":250,"businessLine":"a","sessionId":"s1"}`)
	if r.status != 200 {
		t.Fatalf("apply: %d %s", r.status, r.raw)
	}
	if d := drawnOfReply(t, r); d["dedicated"].(interface{ String() string }).String() != "200" || d["shared"].(interface{ String() string }).String() != "50" {
		t.Fatalf("drawn %s", r.raw)
	}
	var line string
	var ded, shared int64
	if err := sql.DB().QueryRowContext(t.Context(), `SELECT business_line, drawn_dedicated, drawn_shared FROM quota_usage WHERE session_id = 's1'`).
		Scan(&line, &ded, &shared); err != nil || line != "a" || ded != 200 || shared != 50 {
		t.Fatalf("ledger row: %q %d %d %v", line, ded, shared, err)
	}
	r = a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":151,"businessLine":"b","continuation":true}`)
	if r.status != 429 || r.body["reason"] != "LINE_EXHAUSTED" {
		t.Fatalf("past b's limit: %d %s", r.status, r.raw)
	}
	// Finish gives the unused 100 back: 50 to shared, then 50 to dedicated.
	a.mustOK(t, request{method: "POST", path: "/quota/finish", body: `{"resourceName":"llm","sessionId":"s1","actualUsedAmount":150}`})
	r = a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":100,"businessLine":"a"}`)
	if d := drawnOfReply(t, r); r.status != 200 || d["dedicated"].(interface{ String() string }).String() != "50" || d["shared"].(interface{ String() string }).String() != "50" {
		t.Fatalf("after the refund: %d %s", r.status, r.raw)
	}
	// With buffer lent to a, its grants say quota is tight; b's do not.
	a.mustOK(t, request{method: "POST", path: "/admin/policies/llm/buffer/release", body: `{"amount":10,"businessLine":"a","reason":"t"}`})
	if r := a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":1,"businessLine":"a"}`); r.body["quotaTight"] != true {
		t.Fatalf("a with buffer lent: %s", r.raw)
	}
	if r := a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":1,"businessLine":"b"}`); r.status != 200 || r.body["quotaTight"] != nil {
		t.Fatalf("b: %d %s", r.status, r.raw)
	}
	// Status shows the pools: a holds 150 + 100 + 1, 51 of it borrowed.
	st := a.status(t, "llm")
	p, ok := st.body["pools"].(map[string]any)
	if !ok {
		t.Fatalf("status without pools: %s", st.raw)
	}
	la := p["lines"].([]any)[0].(map[string]any)
	if la["businessLine"] != "a" || la["used"].(interface{ String() string }).String() != "251" ||
		la["borrowed"].(interface{ String() string }).String() != "51" || la["watermarkPercent"].(interface{ String() string }).String() != "95" {
		t.Fatalf("line a in status: %v", la)
	}
	if st := a.status(t, "plain"); st.body["pools"] != nil {
		t.Fatalf("plain status shows pools: %s", st.raw)
	}
	// A plain resource answers as before: no drawn, no reason.
	r = a.post(t, "/quota/apply", `{"resourceName":"plain","applyAmount":60}`)
	if r.status != 200 || r.body["drawn"] != nil {
		t.Fatalf("plain apply: %d %s", r.status, r.raw)
	}
	if r = a.post(t, "/quota/apply", `{"resourceName":"plain","applyAmount":60}`); r.status != 429 || r.body["reason"] != nil {
		t.Fatalf("plain refusal: %d %s", r.status, r.raw)
	}
	// A temporary grant on the plain resource covers the rest.
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	a.mustOK(t, request{method: "POST", path: "/admin/policies/plain/grants", body: `{"amount":50,"expiresAt":"` + exp + `","reason":"t"}`})
	r = a.post(t, "/quota/apply", `{"resourceName":"plain","applyAmount":60}`)
	if d := drawnOfReply(t, r); r.status != 200 || d["grant"].(interface{ String() string }).String() != "20" {
		t.Fatalf("with a grant: %d %s", r.status, r.raw)
	}
}

func TestAPIKeyBoundToALine(t *testing.T) {
	a, _ := newPoolsHarness(t, httpapi.APIKey{Key: "k-bound-to-line-a-0123", ClientID: "svc", AllResources: true, Line: "a"})
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":1}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"CORE","weight":1}`})
	call := func(body string) reply {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", a.URL+"/quota/apply", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", "k-bound-to-line-a-0123")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return reply{status: resp.StatusCode, raw: raw}
	}
	if r := call(`{"resourceName":"llm","applyAmount":1,"businessLine":"b"}`); r.status != 403 {
		t.Fatalf("other line: %d %s", r.status, r.raw)
	}
	if r := call(`{"resourceName":"llm","applyAmount":1}`); r.status != 200 {
		t.Fatalf("the key's line by default: %d %s", r.status, r.raw)
	}
}

// TestPoolsSurviveRedisLoss: after Redis loses everything, the next apply
// writes the layout again and rebuilds the period's pool counters from the
// ledger (open sessions' draws, finished ones' charges), so the lines hold
// what they held.
func TestPoolsSurviveRedisLoss(t *testing.T) {
	a, _, mr := newPoolsHarnessOn(t, miniredis.RunT(t))
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":2}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})
	a.mustOK(t, request{method: "POST", path: "/quota/apply", body: `{"resourceName":"llm","applyAmount":250,"businessLine":"a","sessionId":"s1"}`})
	a.mustOK(t, request{method: "POST", path: "/quota/apply", body: `{"resourceName":"llm","applyAmount":120,"businessLine":"b","sessionId":"s2"}`})
	a.mustOK(t, request{method: "POST", path: "/quota/finish", body: `{"resourceName":"llm","sessionId":"s2","actualUsedAmount":90}`})
	lines := func() string {
		st := a.status(t, "llm")
		b, _ := json.Marshal(st.body["pools"].(map[string]any)["lines"])
		return string(b)
	}
	before := lines()
	mr.FlushAll()
	// The next apply (any line) restores the layout and the counters first.
	r := a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":1,"businessLine":"b","sessionId":"s3","continuation":true}`)
	if r.status != 200 {
		t.Fatalf("apply after the loss: %d %s", r.status, r.raw)
	}
	a.mustOK(t, request{method: "POST", path: "/quota/finish", body: `{"resourceName":"llm","sessionId":"s3","actualUsedAmount":0}`})
	if after := lines(); after != before {
		t.Fatalf("lines after Redis lost its data:\n%s\nbefore:\n%s", after, before)
	}
}

// TestPoolsAdminRefusesQueryParameters: the pools' admin endpoints read no
// query parameter, so one is refused (400) instead of silently ignored, as
// everywhere else in the API.
func TestPoolsAdminRefusesQueryParameters(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/search", body: `{"tier":"CORE","weight":3}`})
	base := "/admin/policies/llm"
	for _, rq := range []request{
		{method: "GET", path: base + "/grants?limit=-1"},
		{method: "GET", path: base + "/grants?bogus=1"},
		{method: "GET", path: base + "/reclaims?cursor=zzz"},
		{method: "GET", path: base + "/pool-events?before=abc"},
		{method: "GET", path: base + "/pool-events?limit=5&limit=6"},
		{method: "DELETE", path: base + "/grants/g0?force=true"},
		{method: "POST", path: base + "/reclaims/r9/confirm?bogus=1"},
		{method: "POST", path: base + "/reclaims/r9/cancel?bogus=1"},
		{method: "GET", path: "/admin/policies?bogus=1"},
		{method: "GET", path: base + "?bogus=1"},
	} {
		r := a.do(t, rq)
		if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" || r.body["message"] == "" {
			t.Errorf("%s %s: %d %s, want 400 INVALID_ARGUMENT", rq.method, rq.path, r.status, r.raw)
		}
	}
	if r := a.get(t, base+"/pool-events?limit=5"); r.status != http.StatusOK {
		t.Errorf("pool-events?limit=5: %d %s", r.status, r.raw)
	}
}

// TestGrantsCannotPassTheLargestAmount: a resource's limit and its grants
// together stay within 2^53-1, the largest amount Redis' Lua numbers hold
// exactly; a grant that would pass it is refused and recorded nowhere.
func TestGrantsCannotPassTheLargestAmount(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100}`)
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	base := "/admin/policies/llm"
	if r := a.post(t, base+"/grants", `{"amount":9007199254740891,"expiresAt":"`+exp+`"}`); r.status != http.StatusCreated {
		t.Fatalf("grant up to 2^53-1 in all: %d %s", r.status, r.raw)
	}
	r := a.post(t, base+"/grants", `{"amount":1,"expiresAt":"`+exp+`"}`)
	if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" {
		t.Fatalf("a grant past 2^53-1 in all: %d %s, want 400", r.status, r.raw)
	}
	if r := a.get(t, base+"/grants"); len(r.body["grants"].([]any)) != 1 {
		t.Fatalf("the refused grant was recorded: %s", r.raw)
	}
}

// TestPoolsAdminStepsRefuseABody: DELETE of a line or a grant and the
// reclaim steps read no body; a body (malformed or not) is 400 and the step
// is not taken. Before, DELETE …/lines/x with "{" deleted the line.
func TestPoolsAdminStepsRefuseABody(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	a.mustOK(t, request{method: "PUT", path: base + "/lines/search", body: `{"tier":"CORE","weight":3}`})
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	id := a.post(t, base+"/grants", `{"amount":5,"expiresAt":"`+exp+`"}`).body["grant"].(map[string]any)["id"].(string)
	before := a.get(t, base+"/lines").raw
	grants := a.get(t, base+"/grants").raw
	for _, rq := range []request{
		{method: "DELETE", path: base + "/lines/search", body: `{`},
		{method: "DELETE", path: base + "/lines/search", body: `{"reason":"x"}`},
		{method: "DELETE", path: base + "/grants/" + id, body: `{`},
		{method: "POST", path: base + "/reclaims/r9/confirm", body: `{`},
		{method: "POST", path: base + "/reclaims/r9/cancel", body: `[]`},
	} {
		r := a.do(t, rq)
		if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" {
			t.Errorf("%s %s with body %s: %d %s, want 400", rq.method, rq.path, rq.body, r.status, r.raw)
		}
	}
	if after := a.get(t, base+"/lines").raw; string(after) != string(before) {
		t.Errorf("a refused DELETE changed the lines:\n%s\n%s", before, after)
	}
	if after := a.get(t, base+"/grants").raw; string(after) != string(grants) {
		t.Errorf("a refused DELETE changed the grants:\n%s\n%s", grants, after)
	}
}
