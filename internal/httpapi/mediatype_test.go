package httpapi_test

import (
	"net/http"
	"testing"
)

// What the media checks take (the refusals are in badCases): a JSON body
// said to be UTF-8 in any letter case, an identity Content-Encoding.
func TestJSONBodiesInUTF8AndIdentityCodingAreTaken(t *testing.T) {
	h := newHarness(t)
	h.putPolicy(t, res, `{"quotaType":"COUNT","totalLimit":100}`)
	for i, rq := range []request{
		{ctype: "application/json; charset=UTF-8"},
		{ctype: "application/json; charset=utf-8", encoding: "identity"},
		{encoding: "Identity"},
	} {
		rq.method, rq.path = http.MethodPost, "/quota/apply"
		rq.body = `{"resourceName":"` + res + `","applyAmount":1,"clientId":"c1"}`
		r := h.mustOK(t, rq)
		if got := num(t, r, "grantedAmount"); got != 1 {
			t.Errorf("request %d (%+v): granted %d, want 1", i, rq, got)
		}
	}
}
