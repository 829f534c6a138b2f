package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestApplyNullIdsAndBlankReasonsNameTheirField (docs/pools.md §5, open
// finding 8): an apply's "minAmount": null and "sessionId": null were taken
// as absent (all or nothing, a session id made by the server) where every
// other null is refused, and a grant's or a buffer release's "reason" sent
// empty or only whitespace was stored. Each is now a 400 INVALID_ARGUMENT
// naming the member, in a JSON body, and nothing changes: the balance,
// the lines, the grants, the audit log and the pool events are as before.
func TestApplyNullIdsAndBlankReasonsNameTheirField(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/search", body: `{"tier":"CORE","weight":3}`})
	exp := `"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"`
	apply := func(extra string) request {
		return request{method: http.MethodPost, path: "/quota/apply",
			body: `{"resourceName":"llm","applyAmount":10,"clientId":"c","businessLine":"search"` + extra + `}`}
	}
	grant := func(reason string) request {
		return request{method: http.MethodPost, path: base + "/grants", body: `{"amount":5,"expiresAt":` + exp + `,"reason":` + reason + `}`}
	}
	release := func(reason string) request {
		return request{method: http.MethodPost, path: base + "/buffer/release", body: `{"amount":5,"businessLine":"search","reason":` + reason + `}`}
	}
	reads := []string{"/quota/status?resourceName=llm", base + "/lines", base + "/grants", "/admin/audit", base + "/pool-events"}
	before := map[string]string{}
	for _, p := range reads {
		before[p] = string(a.get(t, p).raw)
	}
	tests := []struct {
		rq    request
		field string
	}{
		{apply(`,"minAmount":null`), "minAmount"},
		{apply(`,"sessionId":null`), "sessionId"},
		{apply(`,"sessionId":null,"minAmount":null`), "sessionId"},
		{grant(`""`), "reason"},
		{grant(`"   "`), "reason"},
		{grant(`"\t\n "`), "reason"},
		{release(`""`), "reason"},
		{release(`" "`), "reason"},
	}
	for _, tt := range tests {
		t.Run(tt.rq.path+" "+tt.rq.body, func(t *testing.T) {
			r := a.do(t, tt.rq)
			msg, _ := r.body["message"].(string)
			if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" || !strings.HasPrefix(msg, "invalid "+tt.field+": ") {
				t.Fatalf("%d %s, want 400 INVALID_ARGUMENT naming %s", r.status, r.raw, tt.field)
			}
		})
	}
	for _, p := range reads {
		if after := string(a.get(t, p).raw); after != before[p] {
			t.Errorf("refused requests changed %s:\n%s\n%s", p, before[p], after)
		}
	}
	// A reason with words in it, and none at all, are still taken.
	a.mustOK(t, grant(`" launch day "`))
	a.mustOK(t, request{method: http.MethodPost, path: base + "/grants", body: `{"amount":5,"expiresAt":` + exp + `}`})
	a.mustOK(t, apply(`,"sessionId":"s-1","minAmount":5`))
}
