package httpapi_test

import (
	"encoding/json"
	"fmt"
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

	opsadmin "github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// newPoolsHarness is newHarness with the pools: the admin endpoints and
// the Service's pools' stores, wired as app.Serve does.
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
	return startPoolsAPI(t, rdb, sql, keys...), sql, mr
}

// startPoolsAPI wires the Service with the pools, the admin endpoints and
// the HTTP layer on the given Redis and policy store, as app.Serve does.
func startPoolsAPI(t *testing.T, rdb redis.UniversalClient, sql *mysqlstore.Store, keys ...httpapi.APIKey) *testAPI {
	t.Helper()
	rs := redisstore.New(rdb)
	sched := &period.Scheduler{}
	svc := quota.NewService(rs, sql, sql, sched, quota.Options{Pools: quota.PoolStores{Config: sql, Balances: rs}})
	admin := opsadmin.NewPools(sql, rs, svc, sched, nil) // a pools change drops the Service's cached copy
	ops := opsadmin.New(opsadmin.Deps{Quota: svc, Live: rs, Ledger: sql, Audit: sql, Sched: sched})
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(prometheus.NewRegistry()),
		Pools: httpapi.PoolAdmin{Lines: admin, Grants: admin, Reclaims: admin}, Operator: ops, Auth: httpapi.AuthConfig{APIKeys: keys}})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{URL: ts.URL, srv: srv}
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
	// b may borrow the larger of its limit (50) and half of the 550 free:
	// 275. (Non-critical: critical work would first put the free buffer
	// into the shared pool, docs/pools.md §1, and borrow half of 650.)
	r = a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":376,"businessLine":"b","critical":false}`)
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
// TestPoolsSurviveRedisLoss runs the same operations on two services, one
// of which loses all of Redis' data halfway: open sessions (their pool
// split), temporary grants (what sessions hold of them), buffer released to
// a line and the period's counters come back from the ledger and the policy
// store, so every line, the shared pool and every grant end the same.
func TestPoolsSurviveRedisLoss(t *testing.T) {
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	run := func(lose bool) (lines, grants, shared string) {
		a, _, mr := newPoolsHarnessOn(t, miniredis.RunT(t))
		a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
		a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":2}`})
		a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})
		a.mustOK(t, request{method: "POST", path: "/admin/policies/llm/grants", body: `{"amount":100,"businessLine":"b","expiresAt":"` + exp + `","reason":"launch"}`})
		a.mustOK(t, request{method: "POST", path: "/admin/policies/llm/buffer/release", body: `{"amount":40,"businessLine":"a","reason":"promo"}`})
		apply := func(body string) {
			t.Helper()
			if r := a.post(t, "/quota/apply", body); r.status != 200 {
				t.Fatalf("apply %s: %d %s", body, r.status, r.raw)
			}
		}
		finish := func(id string, actual int) {
			t.Helper()
			a.mustOK(t, request{method: "POST", path: "/quota/finish", body: fmt.Sprintf(`{"resourceName":"llm","sessionId":%q,"actualUsedAmount":%d}`, id, actual)})
		}
		apply(`{"resourceName":"llm","applyAmount":750,"businessLine":"a","sessionId":"s1","critical":true}`)     // dedicated 200, shared 550
		apply(`{"resourceName":"llm","applyAmount":150,"businessLine":"b","sessionId":"s2","continuation":true}`) // dedicated 100, the last 50 of shared
		apply(`{"resourceName":"llm","applyAmount":80,"businessLine":"b","sessionId":"s3","continuation":true}`)  // the grant
		finish("s2", 90)
		if lose {
			mr.FlushAll()
		}
		// The next apply restores the layout, the moves, the grants, the
		// open sessions and the counters; the finishes then refund the
		// pools each session drew from.
		apply(`{"resourceName":"llm","applyAmount":1,"businessLine":"b","sessionId":"s4","continuation":true}`)
		finish("s4", 0)
		finish("s1", 300)
		finish("s3", 30)
		apply(`{"resourceName":"llm","applyAmount":5,"businessLine":"a","sessionId":"s5"}`)
		st := a.status(t, "llm").body["pools"].(map[string]any)
		b, _ := json.Marshal(st["lines"])
		var gs []map[string]any
		for _, g := range st["grants"].([]any) {
			m := g.(map[string]any)
			delete(m, "id")
			delete(m, "createdAt")
			delete(m, "effectiveAt")
			gs = append(gs, m)
		}
		g, _ := json.Marshal(gs)
		return string(b), string(g), fmt.Sprint(st["sharedUsed"], " ", st["bufferFree"])
	}
	wantLines, wantGrants, wantShared := run(false)
	lines, grants, shared := run(true)
	if lines != wantLines {
		t.Errorf("lines after Redis lost its data:\n%s\nwithout the loss:\n%s", lines, wantLines)
	}
	if grants != wantGrants {
		t.Errorf("grants after Redis lost its data:\n%s\nwithout the loss:\n%s", grants, wantGrants)
	}
	if shared != wantShared {
		t.Errorf("shared used, free buffer after Redis lost its data: %s, without the loss: %s", shared, wantShared)
	}
	if !strings.Contains(wantGrants, `"used":30`) || !strings.Contains(wantLines, `"buffer":40`) {
		t.Fatalf("the scenario does not exercise grants and releases: %s %s", wantGrants, wantLines)
	}
}
