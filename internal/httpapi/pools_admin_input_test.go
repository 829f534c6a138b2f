package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

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
