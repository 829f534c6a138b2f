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
	ops := opsadmin.New(opsadmin.Deps{Quota: svc, Live: rs, Ledger: sql, Audit: sql, Sched: sched})
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(prometheus.NewRegistry()),
		Pools: admin, Operator: ops, Auth: httpapi.AuthConfig{APIKeys: keys}})
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
		{"grant with a control character in its reason", request{method: "POST", path: base + "/grants", body: `{"amount":5,"expiresAt":"` + exp + `","reason":"a\u0007b"}`}, 400},
		{"grant with a reason of 501 characters", request{method: "POST", path: base + "/grants", body: `{"amount":5,"expiresAt":"` + exp + `","reason":"` + strings.Repeat("é", 501) + `"}`}, 400},
		{"release with a control character in its reason", request{method: "POST", path: base + "/buffer/release", body: `{"amount":5,"reason":"a\u001bb"}`}, 400},
		{"grant with a bad time", request{method: "POST", path: base + "/grants", body: `{"amount":5,"expiresAt":"tomorrow"}`}, 400},
		{"release above the buffer", request{method: "POST", path: base + "/buffer/release", body: `{"amount":10001}`}, 409},
		{"delete an unknown line", request{method: "DELETE", path: base + "/lines/zz"}, 404},
		{"void an unknown grant", request{method: "DELETE", path: base + "/grants/g0"}, 404},
		{"confirm an unknown reclaim", request{method: "POST", path: base + "/reclaims/r9/confirm"}, 404},
		{"reclaim step with an unknown parameter", request{method: "POST", path: base + "/reclaims/r9/confirm?why=x"}, 400},
		{"reclaim step with a body", request{method: "POST", path: base + "/reclaims/r9/cancel", body: `{"reason":"x"}`}, 400},
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
		apply(`{"resourceName":"llm","applyAmount":280,"businessLine":"a","sessionId":"s1"}`)                     // dedicated 200, shared 80
		apply(`{"resourceName":"llm","applyAmount":150,"businessLine":"b","sessionId":"s2","continuation":true}`) // dedicated 100, shared 50
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
		finish("s1", 100)
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

// TestPolicyVersionChangesWithGrantsAndLines: apply and heartbeat answers
// carry a policyVersion that changes when a temporary grant is added or
// voided, a line is added or changed, the pool settings change or buffer is
// released (issue 12: the SDK's LocalPool refetches on a new version), and
// stays put otherwise.
func TestPolicyVersionChangesWithGrantsAndLines(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	n := 0
	version := func(line string) string {
		t.Helper()
		n++
		body := fmt.Sprintf(`{"resourceName":"llm","applyAmount":1,"sessionId":"v%d"`, n)
		if line != "" {
			body += `,"businessLine":"` + line + `"`
		}
		r := a.post(t, "/quota/apply", body+"}")
		if r.status != 200 {
			t.Fatalf("apply: %d %s", r.status, r.raw)
		}
		v, _ := r.body["policyVersion"].(string)
		hb := a.post(t, "/quota/heartbeat", fmt.Sprintf(`{"resourceName":"llm","sessionId":"v%d"}`, n))
		if hb.status != 200 || hb.body["policyVersion"] != v || v == "" {
			t.Fatalf("heartbeat's version %v, apply's %q: %d %s", hb.body["policyVersion"], v, hb.status, hb.raw)
		}
		return v
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	plain := version("")
	if version("") != plain {
		t.Fatal("the version changed with nothing changed")
	}
	seen := map[string]string{plain: "plain"}
	step := func(name, line string) {
		t.Helper()
		v := version(line)
		if prev, ok := seen[v]; ok {
			t.Fatalf("after %s the version %q is the one of %s", name, v, prev)
		}
		seen[v] = name
		if version(line) != v {
			t.Fatalf("after %s the version changed with nothing changed", name)
		}
	}
	r := a.post(t, "/admin/policies/llm/grants", `{"amount":500,"expiresAt":"`+exp+`","reason":"launch"}`)
	if r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.raw)
	}
	step("a grant", "")
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/llm/grants/" + r.body["grant"].(map[string]any)["id"].(string)})
	if version("") != plain {
		t.Fatal("voiding the only grant did not bring the version back to the plain one")
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":2}`})
	step("a line", "a")
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":3}`})
	step("a line's weight", "a")
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})
	step("another line", "a")
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/pools", body: `{"sharedPercent":50,"dedicatedPercent":40,"bufferPercent":10}`})
	step("the pool settings", "a")
	a.mustOK(t, request{method: "POST", path: "/admin/policies/llm/buffer/release", body: `{"amount":10,"businessLine":"a","reason":"promo"}`})
	step("a buffer release", "a")
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/llm/lines/b"})
	step("a line's removal", "a")
}

// TestPolicyPutAndPatchTakePools: PUT and PATCH /admin/policies/{r} take
// the policy's "pools" settings; a limit or settings the lines do not fit,
// shares not summing to 100 or an unknown field is a 400 that changes
// nothing (neither the policy nor the pools); a new limit lays the pools
// out again in Redis.
func TestPolicyPutAndPatchTakePools(t *testing.T) {
	a, _ := newPoolsHarness(t)
	r := a.do(t, request{method: "PUT", path: "/admin/policies/llm", body: `{"quotaType":"TOKENS","totalLimit":100000,
		"pools":{"sharedPercent":50,"dedicatedPercent":40,"bufferPercent":10,"borrowLimitPercent":300}}`})
	if r.status != 201 || r.body["pools"].(map[string]any)["sharedPercent"].(interface{ String() string }).String() != "50" {
		t.Fatalf("create with pools: %d %s", r.status, r.raw)
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","dedicated":30000}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})
	state := func() string {
		return string(a.get(t, "/admin/policies/llm").raw) + string(a.get(t, "/admin/policies/llm/pools").raw)
	}
	before := state()
	if num(t, a.get(t, "/admin/policies/llm/pools"), "shared") != 50000 {
		t.Fatalf("pools: %s", before)
	}
	bad := []struct {
		name, method, body, field string
	}{
		{"shares not summing to 100", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":70,"dedicatedPercent":30,"bufferPercent":10}}`, "pools"},
		{"unknown pools field", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercnt":60}}`, "pools.sharedPercnt"},
		{"unknown elasticity", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"elasticity":"SOMETIMES"}}`, "pools.elasticity"},
		{"negative share", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":-10,"dedicatedPercent":100,"bufferPercent":10}}`, "pools.sharedPercent"},
		{"pools not an object", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":7}`, "pools"},
		{"a limit the lines do not fit", "PUT", `{"quotaType":"TOKENS","totalLimit":50000}`, "totalLimit"},
		{"settings the lines do not fit", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":75,"dedicatedPercent":20,"bufferPercent":5}}`, "pools"},
		{"patch: a limit the lines do not fit", "PATCH", `{"totalLimit":50000}`, "totalLimit"},
		{"patch: settings the lines do not fit", "PATCH", `{"pools":{"sharedPercent":70,"dedicatedPercent":20}}`, "pools"},
		{"patch: shares not summing to 100", "PATCH", `{"pools":{"sharedPercent":61}}`, "pools"},
		{"patch: a bad policy field next to good pools", "PATCH", `{"leakThresholdSeconds":-1,"pools":{"borrowLimitPercent":100}}`, "leakThresholdSeconds"},
		{"patch: borrowing limit too high", "PATCH", `{"pools":{"borrowLimitPercent":1001}}`, "pools.borrowLimitPercent"},
	}
	for _, tc := range bad {
		r := a.do(t, request{method: tc.method, path: "/admin/policies/llm", body: tc.body})
		if r.status != 400 || !strings.Contains(string(r.raw), `"message":"invalid `+tc.field+`:`) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, r.status, r.raw, tc.field)
		}
		if after := state(); after != before {
			t.Fatalf("%s changed the policy or the pools:\n%s\nbefore:\n%s", tc.name, after, before)
		}
	}
	// PATCH of the pools alone leaves the policy as it is.
	pol := string(a.get(t, "/admin/policies/llm").raw)
	r = a.do(t, request{method: "PATCH", path: "/admin/policies/llm", body: `{"pools":{"borrowLimitPercent":400}}`})
	if r.status != 200 || string(a.get(t, "/admin/policies/llm").raw) != pol {
		t.Fatalf("patch pools: %d %s", r.status, r.raw)
	}
	if got := a.get(t, "/admin/policies/llm/pools").body["pools"].(map[string]any)["borrowLimitPercent"]; fmt.Sprint(got) != "400" {
		t.Fatalf("borrowLimitPercent after the patch: %v", got)
	}
	// A new limit re-cuts the pools in Redis: a's 30 000 + a borrowing of
	// 90 000 fits only the new shared pool of 100 000.
	a.mustOK(t, request{method: "PATCH", path: "/admin/policies/llm", body: `{"totalLimit":200000}`})
	if r := a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":120000,"businessLine":"a","sessionId":"big"}`); r.status != 200 {
		t.Fatalf("apply after the new limit: %d %s", r.status, r.raw)
	}
	// "pools": null brings the defaults back.
	a.mustOK(t, request{method: "PATCH", path: "/admin/policies/llm", body: `{"pools":null}`})
	if got := a.get(t, "/admin/policies/llm/pools").body["pools"].(map[string]any)["sharedPercent"]; fmt.Sprint(got) != "60" {
		t.Fatalf("sharedPercent after pools: null: %v", got)
	}
}

// TestStatusShowsEachLinesReservedAndMode: GET /quota/status shows, per
// line, what its open sessions hold and its elasticity mode: the one the
// controller chose under AUTO (kept in Redis, so any instance shows it),
// PREDICTIVE before it chose, or the one the settings pin.
func TestStatusShowsEachLinesReservedAndMode(t *testing.T) {
	a, _, mr := newPoolsHarnessOn(t, miniredis.RunT(t))
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":10000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":1}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"GROWTH","weight":1}`})
	a.mustOK(t, request{method: "POST", path: "/quota/apply", body: `{"resourceName":"llm","applyAmount":100,"businessLine":"a","sessionId":"s1"}`})
	a.mustOK(t, request{method: "POST", path: "/quota/apply", body: `{"resourceName":"llm","applyAmount":50,"businessLine":"a","sessionId":"s2"}`})
	a.mustOK(t, request{method: "POST", path: "/quota/finish", body: `{"resourceName":"llm","sessionId":"s2","actualUsedAmount":20}`})
	lines := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, l := range a.status(t, "llm").body["pools"].(map[string]any)["lines"].([]any) {
			m := l.(map[string]any)
			out[m["businessLine"].(string)] = m
		}
		return out
	}
	mr.HSet("qc:{llm}:pl", "m:b", "REACTIVE") // what the controller of another instance chose
	ls := lines()
	if fmt.Sprintf("%v %v %v", ls["a"]["used"], ls["a"]["reserved"], ls["b"]["reserved"]) != "120 100 0" {
		t.Fatalf("used, reserved: %q: %v", fmt.Sprintf("%v %v %v", ls["a"]["used"], ls["a"]["reserved"], ls["b"]["reserved"]), ls)
	}
	if ls["a"]["elasticityMode"] != "PREDICTIVE" || ls["b"]["elasticityMode"] != "REACTIVE" {
		t.Fatalf("modes under AUTO: %v %v", ls["a"]["elasticityMode"], ls["b"]["elasticityMode"])
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/pools", body: `{"elasticity":"OFF"}`})
	if ls := lines(); ls["a"]["elasticityMode"] != "OFF" || ls["b"]["elasticityMode"] != "OFF" {
		t.Fatalf("modes under OFF: %v", ls)
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

// TestPoolsAdminErrorsNameTheFieldAndTheRule: a refused line or setting is
// answered with the field that is wrong and what it must be. "dedicated":0
// used to be answered "invalid weight: must be 1 … 1000" (a field not
// sent), and a fractional percentage "must be a JSON value of another type".
func TestPoolsAdminErrorsNameTheFieldAndTheRule(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	tests := []struct {
		name, path, body, want string
	}{
		{"dedicated 0", base + "/lines/x", `{"tier":"CORE","dedicated":0}`, "invalid dedicated: must be 1 … 2^53-1"},
		{"weight 0", base + "/lines/x", `{"tier":"CORE","weight":0}`, "invalid weight: must be 1 … 1000"},
		{"fractional weight", base + "/lines/x", `{"tier":"CORE","weight":1.5}`, "invalid weight: must be a whole number"},
		{"fractional sharedPercent", base + "/pools", `{"sharedPercent":60.5}`, "invalid sharedPercent: must be a whole number (a JSON number without fraction or exponent) (0 … 100)"},
		{"string borrowLimitPercent", base + "/pools", `{"borrowLimitPercent":"50"}`, "invalid borrowLimitPercent: must be a JSON number, not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.do(t, request{method: "PUT", path: tt.path, body: tt.body})
			msg, _ := r.body["message"].(string)
			if r.status != http.StatusBadRequest || !strings.HasPrefix(msg, tt.want) {
				t.Fatalf("%d %s, want 400 %q", r.status, r.raw, tt.want)
			}
		})
	}
	if r := a.get(t, base+"/lines"); len(r.body["lines"].([]any)) != 0 {
		t.Fatalf("refused lines were stored: %s", r.raw)
	}
}
