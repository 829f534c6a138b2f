package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPoolsAdminNullsAndWrongTypesNameTheirField: every member of a pools'
// admin body given null or a value of another JSON type is answered 400
// INVALID_ARGUMENT naming that member, and nothing changes. "dedicated":
// null was answered "invalid weight: must be 1 … 1000" (a field not sent),
// "sharedPercent": null "invalid pools: … must be 100", and "reclaimDryRun":
// null or "businessLine": null were taken as false and "every line".
func TestPoolsAdminNullsAndWrongTypesNameTheirField(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/search", body: `{"tier":"CORE","weight":3}`})
	exp := `"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"`
	before := a.get(t, base+"/lines").raw
	policy := a.get(t, base).raw
	line := func(body string) request {
		return request{method: http.MethodPut, path: base + "/lines/x", body: body}
	}
	settings := func(body string) request { return request{method: http.MethodPut, path: base + "/pools", body: body} }
	grant := func(body string) request { return request{method: http.MethodPost, path: base + "/grants", body: body} }
	release := func(body string) request {
		return request{method: http.MethodPost, path: base + "/buffer/release", body: body}
	}
	tests := []struct {
		rq    request
		field string
	}{
		{line(`{"tier":"CORE","dedicated":null}`), "dedicated"},
		{line(`{"tier":"CORE","weight":1,"dedicated":null}`), "dedicated"},
		{line(`{"tier":"CORE","weight":null}`), "weight"},
		{line(`{"tier":"CORE","dedicated":1000,"weight":null}`), "weight"},
		{line(`{"tier":null,"weight":1}`), "tier"},
		{line(`{"tier":"CORE","weight":"1"}`), "weight"},
		{line(`{"tier":"CORE","dedicated":"5"}`), "dedicated"},
		{line(`{"tier":"CORE","dedicated":true}`), "dedicated"},
		{line(`{"tier":"CORE","dedicated":{}}`), "dedicated"},
		{line(`{"tier":1,"weight":1}`), "tier"},
		{line(`{"tier":["CORE"],"weight":1}`), "tier"},
		{settings(`{"sharedPercent":null}`), "sharedPercent"},
		{settings(`{"dedicatedPercent":null}`), "dedicatedPercent"},
		{settings(`{"bufferPercent":null}`), "bufferPercent"},
		{settings(`{"borrowLimitPercent":null}`), "borrowLimitPercent"},
		{settings(`{"reclaimThresholdPercent":null}`), "reclaimThresholdPercent"},
		{settings(`{"reclaimConfirmSeconds":null}`), "reclaimConfirmSeconds"},
		{settings(`{"elasticity":null}`), "elasticity"},
		{settings(`{"reclaimDryRun":null}`), "reclaimDryRun"},
		{settings(`{"reclaimDryRun":"true"}`), "reclaimDryRun"},
		{settings(`{"elasticity":5}`), "elasticity"},
		{settings(`{"sharedPercent":"60"}`), "sharedPercent"},
		{grant(`{"amount":null,"expiresAt":` + exp + `}`), "amount"},
		{grant(`{"amount":"5","expiresAt":` + exp + `}`), "amount"},
		{grant(`{"amount":5,"businessLine":null,"expiresAt":` + exp + `}`), "businessLine"},
		{grant(`{"amount":5,"businessLine":5,"expiresAt":` + exp + `}`), "businessLine"},
		{grant(`{"amount":5,"effectiveAt":null,"expiresAt":` + exp + `}`), "effectiveAt"},
		{grant(`{"amount":5,"effectiveAt":5,"expiresAt":` + exp + `}`), "effectiveAt"},
		{grant(`{"amount":5,"expiresAt":null}`), "expiresAt"},
		{grant(`{"amount":5,"expiresAt":5}`), "expiresAt"},
		{grant(`{"amount":5,"expiresAt":` + exp + `,"reason":null}`), "reason"},
		{grant(`{"amount":5,"expiresAt":` + exp + `,"reason":5}`), "reason"},
		{release(`{"amount":null}`), "amount"},
		{release(`{"amount":5,"businessLine":null}`), "businessLine"},
		{release(`{"amount":5,"expiresAt":null}`), "expiresAt"},
		{release(`{"amount":5,"reason":null}`), "reason"},
		{release(`{"amount":5,"reason":false}`), "reason"},
		{release(`{"amount":5,"effectiveAt":null}`), "effectiveAt"},
		{request{method: http.MethodPut, path: base, body: `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":null}}`}, "pools.sharedPercent"},
		{request{method: http.MethodPut, path: base, body: `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"reclaimDryRun":null}}`}, "pools.reclaimDryRun"},
		{request{method: http.MethodPut, path: base, body: `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"elasticity":[]}}`}, "pools.elasticity"},
	}
	for _, tt := range tests {
		t.Run(tt.rq.method+" "+strings.TrimPrefix(tt.rq.path, base)+" "+tt.rq.body, func(t *testing.T) {
			r := a.do(t, tt.rq)
			msg, _ := r.body["message"].(string)
			if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" || !strings.HasPrefix(msg, "invalid "+tt.field+": ") {
				t.Fatalf("%d %s, want 400 INVALID_ARGUMENT naming %s", r.status, r.raw, tt.field)
			}
		})
	}
	if after := a.get(t, base+"/lines").raw; string(after) != string(before) {
		t.Errorf("refused requests changed the pools:\n%s\n%s", before, after)
	}
	if after := a.get(t, base).raw; string(after) != string(policy) {
		t.Errorf("refused requests changed the policy:\n%s\n%s", policy, after)
	}
	if r := a.get(t, base+"/grants"); len(r.body["grants"].([]any)) != 0 {
		t.Errorf("refused requests recorded grants: %s", r.raw)
	}
}
