package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// newPoolsHarness is newHarness with the pools' admin endpoints.
func newPoolsHarness(t *testing.T) *testAPI {
	t.Helper()
	sql := newSQLite(t)
	rs := redisstore.New(newMiniredis(t))
	sched := &period.Scheduler{}
	svc := quota.NewService(rs, sql, sql, sched, quota.Options{})
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(prometheus.NewRegistry()),
		Pools: poolctl.NewAdmin(sql, rs, sched, nil)})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{URL: ts.URL, srv: srv}
}

func TestPoolsAdminEndpoints(t *testing.T) {
	a := newPoolsHarness(t)
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
	a := newPoolsHarness(t)
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
