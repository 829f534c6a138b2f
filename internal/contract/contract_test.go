package contract_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestEveryAnswerMatchesTheDocument starts a server (dev mode; production
// mode on the real Redis and MySQL), calls every operation of openapi.yaml
// with answers of success and of error, and holds every answer to the
// document and to the generated client (checker).
func TestEveryAnswerMatchesTheDocument(t *testing.T) {
	for _, mode := range []testenv.Mode{testenv.Dev, testenv.Real} {
		t.Run(string(mode), func(t *testing.T) {
			s, ledger := startServer(t, mode)
			c := newChecker(t, s)
			res := testenv.Resource(t)
			ops(c)
			policies(c, res)
			quotaRoutes(c, res)
			admin(c, res)
			poolRoutes(c, testenv.Resource(t), ledger)
			unauthenticated(c, res)
			deletes(c, res)
			c.assertCovered(loadSpec(t))
		})
	}
}

func ops(c *checker) {
	for _, p := range []string{"/healthz", "/readyz", "/healthz/backends", "/metrics"} {
		c.do(req{method: http.MethodGet, path: p}, http.StatusOK)
	}
}

// policies leaves res a TOKENS policy of 1000.
func policies(c *checker, res string) {
	p := "/admin/policies/" + res
	c.do(req{method: http.MethodPut, path: p, body: map[string]any{"quotaType": "TOKENS", "totalLimit": 1000}}, http.StatusCreated)
	c.do(req{method: http.MethodPut, path: p, body: map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "failMode": "CLOSED"}}, http.StatusOK)
	c.do(req{method: http.MethodPut, path: p, body: map[string]any{"quotaType": "NOPE", "totalLimit": 1000}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPut, path: p, raw: []byte(`quotaType=TOKENS`), contentType: "text/plain"}, http.StatusUnsupportedMediaType)
	c.do(req{method: http.MethodPut, path: p, raw: hugeBody()}, http.StatusRequestEntityTooLarge)
	c.do(req{method: http.MethodPut, path: "/admin/policies/Not%20A%20Name", body: map[string]any{"quotaType": "TOKENS", "totalLimit": 1}}, http.StatusBadRequest)

	c.do(req{method: http.MethodGet, path: "/admin/policies"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: p}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: p + "-none"}, http.StatusNotFound)
	c.do(req{method: http.MethodGet, path: "/admin/policies/Not%20A%20Name"}, http.StatusBadRequest)

	merge := "application/merge-patch+json"
	c.do(req{method: http.MethodPatch, path: p + "?reason=contract", raw: []byte(`{"totalLimit": 1000, "leakThresholdSeconds": 60}`), contentType: merge}, http.StatusOK)
	c.do(req{method: http.MethodPatch, path: p, raw: []byte(`{"totalLimit": -1}`), contentType: merge}, http.StatusBadRequest)
	c.do(req{method: http.MethodPatch, path: p + "-none", raw: []byte(`{"totalLimit": 5}`), contentType: merge}, http.StatusNotFound)
	c.do(req{method: http.MethodPatch, path: p, raw: []byte(`{"totalLimit": 5}`), contentType: "text/plain"}, http.StatusUnsupportedMediaType)

	c.do(req{method: http.MethodPost, path: p + "/reset", body: map[string]any{"reason": "contract"}}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: p + "-none/reset", body: map[string]any{}}, http.StatusNotFound)
	c.do(req{method: http.MethodPost, path: p + "/reset", body: map[string]any{"reason": strings.Repeat("x", 501)}}, http.StatusBadRequest)
}

// quotaRoutes applies, heartbeats and finishes on res (1000 tokens), and
// leaves one session of 100 open (returned by openSession).
func quotaRoutes(c *checker, res string) {
	apply := func(body map[string]any, want ...int) answer {
		return c.do(req{method: http.MethodPost, path: "/quota/apply", body: body}, want...)
	}
	a := apply(map[string]any{"resourceName": res, "applyAmount": 100, "sessionId": "contract-s1"}, http.StatusOK)
	id := a.str(c.t, "sessionId")
	apply(map[string]any{"resourceName": res, "applyAmount": 100, "sessionId": "contract-s1"}, http.StatusOK) // a replay
	apply(map[string]any{"resourceName": res, "applyAmount": 200, "sessionId": "contract-s1"}, http.StatusConflict)
	refused := apply(map[string]any{"resourceName": res, "applyAmount": 5000}, http.StatusTooManyRequests)
	if refused.header.Get("Retry-After") != "" {
		c.t.Errorf("a policy without resets answered Retry-After %q", refused.header.Get("Retry-After"))
	}
	apply(map[string]any{"resourceName": res + "-none", "applyAmount": 1}, http.StatusNotFound)
	apply(map[string]any{"resourceName": res, "applyAmount": 0}, http.StatusBadRequest)
	apply(map[string]any{"resourceName": res, "applyAmount": 1, "clientId": "someone-else"}, http.StatusForbidden)
	c.do(req{method: http.MethodPost, path: "/quota/apply", raw: []byte(`{"resourceName":`)}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: "/quota/apply", raw: []byte(`resourceName=x`), contentType: "text/plain"}, http.StatusUnsupportedMediaType)
	c.do(req{method: http.MethodPost, path: "/quota/apply", raw: hugeBody()}, http.StatusRequestEntityTooLarge)

	hb := func(body map[string]any, want ...int) answer {
		return c.do(req{method: http.MethodPost, path: "/quota/heartbeat", body: body}, want...)
	}
	hb(map[string]any{"resourceName": res, "sessionId": id}, http.StatusOK)
	hb(map[string]any{"resourceName": res, "sessionId": "contract-none"}, http.StatusNotFound)
	hb(map[string]any{"resourceName": res}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: "/quota/heartbeat", raw: []byte(`x`), contentType: "text/plain"}, http.StatusUnsupportedMediaType)
	c.do(req{method: http.MethodPost, path: "/quota/heartbeat", raw: hugeBody()}, http.StatusRequestEntityTooLarge)

	st := func(q string, want ...int) answer {
		return c.do(req{method: http.MethodGet, path: "/quota/status" + q}, want...)
	}
	st("?resourceName="+res, http.StatusOK)
	st("?resourceName="+res+"-none", http.StatusNotFound)
	st("", http.StatusBadRequest)

	fin := func(body map[string]any, want ...int) answer {
		return c.do(req{method: http.MethodPost, path: "/quota/finish", body: body}, want...)
	}
	fin(map[string]any{"resourceName": res, "sessionId": id, "actualUsedAmount": 60}, http.StatusOK)
	fin(map[string]any{"resourceName": res, "sessionId": id, "actualUsedAmount": 70}, http.StatusConflict)
	hb(map[string]any{"resourceName": res, "sessionId": id}, http.StatusConflict) // SESSION_NOT_ACTIVE
	fin(map[string]any{"resourceName": res, "sessionId": "contract-none", "actualUsedAmount": 1}, http.StatusNotFound)
	fin(map[string]any{"resourceName": res, "sessionId": id, "actualUsedAmount": -1}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: "/quota/finish", raw: []byte(`x`), contentType: "text/plain"}, http.StatusUnsupportedMediaType)
	c.do(req{method: http.MethodPost, path: "/quota/finish", raw: hugeBody()}, http.StatusRequestEntityTooLarge)

	apply(map[string]any{"resourceName": res, "applyAmount": 100, "sessionId": "contract-open"}, http.StatusOK)
	// A partial grant: 1000 - 60 charged - 100 held leaves 840.
	part := apply(map[string]any{"resourceName": res, "applyAmount": 900, "minAmount": 800}, http.StatusOK)
	fin(map[string]any{"resourceName": res, "sessionId": part.str(c.t, "sessionId"), "actualUsedAmount": 0}, http.StatusOK)
	// Changing the quota type of a period with usage needs force.
	merge := "application/merge-patch+json"
	c.do(req{method: http.MethodPatch, path: "/admin/policies/" + res, raw: []byte(`{"quotaType": "COUNT"}`), contentType: merge}, http.StatusConflict)
}

// hugeBody is a JSON body over the 1 MiB limit.
func hugeBody() []byte {
	return []byte(`{"reason":"` + strings.Repeat("x", 1<<20+10) + `"}`)
}
