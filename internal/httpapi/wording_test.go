package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestDecodingErrorsUseTheProjectsWording: a body that is not valid JSON,
// a member of the wrong JSON type and an unknown member get the same
// wording on every endpoint — the body decoder's, PATCH's merged policy and
// its "pools" member alike — and never the JSON library's ("jsontext: …",
// "json: unknown field"); nothing is changed.
func TestDecodingErrorsUseTheProjectsWording(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	before := string(a.get(t, "/admin/policies/llm").raw)
	poolsBefore := string(a.get(t, "/admin/policies/llm/pools").raw)
	apply := func(body string) request { return request{method: "POST", path: "/quota/apply", body: body} }
	patch := func(body string) request {
		return request{method: "PATCH", path: "/admin/policies/llm", body: body, ctype: "application/merge-patch+json"}
	}
	tests := []struct {
		name string
		rq   request
		want string
	}{
		{"apply boolean amount", apply(`{"resourceName":"llm","applyAmount":true}`), "invalid applyAmount: must be a JSON number, not a boolean"},
		{"apply object amount", apply(`{"resourceName":"llm","applyAmount":{}}`), "invalid applyAmount: must be a JSON number, not an object"},
		{"apply string amount", apply(`{"resourceName":"llm","applyAmount":"5"}`), "invalid applyAmount: must be a JSON number, not a string"},
		{"apply fraction", apply(`{"resourceName":"llm","applyAmount":1.5}`), "invalid applyAmount: must be a whole number (a JSON number without fraction or exponent)"},
		{"apply number name", apply(`{"resourceName":5,"applyAmount":1}`), "invalid resourceName: must be a JSON string, not a number"},
		{"apply syntax", apply(`{"resourceName":"llm",,"applyAmount":1}`), `invalid body: is not valid JSON: unexpected "," at byte 22`},
		{"patch syntax", patch(`{"totalLimit":1,,}`), `invalid body: is not valid JSON: unexpected "," at byte 16`},
		{"patch unknown", patch(`{"bogus":1}`), "invalid bogus: is not a known field (names are case-sensitive)"},
		{"patch other case", patch(`{"TOTALLIMIT":5}`), "invalid TOTALLIMIT: is not a known field (names are case-sensitive)"},
		{"patch boolean limit", patch(`{"totalLimit":true}`), "invalid totalLimit: must be a JSON number, not a boolean"},
		{"patch string limit", patch(`{"totalLimit":"5"}`), "invalid totalLimit: must be a JSON number, not a string"},
		{"patch fraction", patch(`{"leakThresholdSeconds":1.5}`), "invalid leakThresholdSeconds: must be a whole number (a JSON number without fraction or exponent)"},
		{"patch number cron", patch(`{"resetCron":5}`), "invalid resetCron: must be a JSON string, not a number"},
		{"patch pools unknown", patch(`{"pools":{"bogus":1}}`), "invalid pools.bogus: is not a known field (names are case-sensitive)"},
		{"patch pools string", patch(`{"pools":{"sharedPercent":"5"}}`), "invalid pools.sharedPercent: must be a JSON number, not a string"},
		{"patch pools fraction", patch(`{"pools":{"sharedPercent":5.5}}`), "invalid pools.sharedPercent: must be a whole number (a JSON number without fraction or exponent) (0 … 100)"},
		{"put pools string", request{method: "PUT", path: "/admin/policies/llm/pools", body: `{"borrowLimitPercent":"50"}`}, "invalid borrowLimitPercent: must be a JSON number, not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.do(t, tt.rq)
			msg, _ := r.body["message"].(string)
			if r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" || msg != tt.want {
				t.Fatalf("%d %s; want 400 INVALID_ARGUMENT %q", r.status, r.raw, tt.want)
			}
			if strings.Contains(msg, "json") {
				t.Fatalf("the JSON library's wording leaked: %q", msg)
			}
		})
	}
	if after := string(a.get(t, "/admin/policies/llm").raw); after != before {
		t.Fatalf("refused requests changed the policy: %s, was %s", after, before)
	}
	if after := string(a.get(t, "/admin/policies/llm/pools").raw); after != poolsBefore {
		t.Fatalf("refused requests changed the pools: %s, was %s", after, poolsBefore)
	}
}
