package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestApplyNullFlagsAndLineWeightsNameTheirField: an apply's "critical":
// null and "continuation": null are answered 400 naming the member, as
// "businessLine": null is (they were read as critical and as not a
// continuation); a weight past 2^53-1 or with a fraction is answered with
// the weight's own range 1 … 1000 (it named 2^53-1); nothing changes.
func TestApplyNullFlagsAndLineWeightsNameTheirField(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/search", body: `{"tier":"CORE","weight":3}`})
	lines := a.get(t, base+"/lines").raw
	status := a.get(t, "/quota/status?resourceName=llm").raw
	apply := func(extra string) request {
		return request{method: http.MethodPost, path: "/quota/apply",
			body: `{"resourceName":"llm","applyAmount":10,"clientId":"c","businessLine":"search"` + extra + `}`}
	}
	line := func(body string) request { return request{method: http.MethodPut, path: base + "/lines/x", body: body} }
	tests := []struct {
		rq     request
		field  string
		reason string
	}{
		{apply(`,"critical":null`), "critical", "must not be null"},
		{apply(`,"continuation":null`), "continuation", "must not be null"},
		{apply(`,"critical":false,"continuation":null`), "continuation", "must not be null"},
		{request{method: http.MethodPost, path: "/quota/apply",
			body: `{"resourceName":"llm","applyAmount":10,"clientId":"c","businessLine":null}`}, "businessLine", "must not be null"},
		{line(`{"tier":"CORE","weight":9007199254740993}`), "weight", "1 … 1000"},
		{line(`{"tier":"CORE","weight":-9007199254740993}`), "weight", "1 … 1000"},
		{line(`{"tier":"CORE","weight":1.5}`), "weight", "1 … 1000"},
		{line(`{"tier":"CORE","weight":1001}`), "weight", "1 … 1000"},
		{line(`{"tier":"CORE","weight":0}`), "weight", "1 … 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.rq.path+" "+tt.rq.body, func(t *testing.T) {
			r := a.do(t, tt.rq)
			msg, _ := r.body["message"].(string)
			if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" ||
				!strings.HasPrefix(msg, "invalid "+tt.field+": ") || !strings.Contains(msg, tt.reason) {
				t.Fatalf("%d %s, want 400 INVALID_ARGUMENT naming %s with %q", r.status, r.raw, tt.field, tt.reason)
			}
			if strings.Contains(msg, "2^53") {
				t.Errorf("%s names the amounts' bound, not the field's range", msg)
			}
		})
	}
	if after := a.get(t, base+"/lines").raw; string(after) != string(lines) {
		t.Errorf("refused requests changed the lines:\n%s\n%s", lines, after)
	}
	if after := a.get(t, "/quota/status?resourceName=llm").raw; string(after) != string(status) {
		t.Errorf("refused applies changed the balance:\n%s\n%s", status, after)
	}
}

// TestALineWithNeitherWeightNorDedicatedHasWeightOne: {"tier":"CORE"} alone
// is the documented default (api/openapi.yaml LineSpec.weight default 1):
// the line is stored with weight 1, as GET …/lines shows.
func TestALineWithNeitherWeightNorDedicatedHasWeightOne(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/a", body: `{"tier":"CORE","weight":3}`})
	a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/x", body: `{"tier":"CORE"}`})
	r := a.get(t, base+"/lines")
	var got map[string]any
	for _, l := range r.body["lines"].([]any) {
		if m := l.(map[string]any); m["businessLine"] == "x" {
			got = m
		}
	}
	if got == nil || fmt.Sprint(got["weight"]) != "1" {
		t.Fatalf("line x = %v, want weight 1: %s", got, r.raw)
	}
	if d := fmt.Sprint(got["dedicated"]); d != "7500" { // 30 000 dedicated, weights 3 and 1
		t.Errorf("line x holds %s of the dedicated pool, want 7500 (weight 1 of 4)", d)
	}
}
