package contract_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestOutageAnswersMatchTheDocument cuts Redis under a production-mode
// server (through a faults.Proxy) and holds the answers of the outage to
// the document: 503 BACKEND_UNAVAILABLE or CIRCUIT_BREAKER_OPEN of the
// client routes, the fail-open grant of a failMode OPEN policy, the
// degraded answer of /healthz/backends, and whatever /readyz and the admin
// routes answer meanwhile.
func TestOutageAnswersMatchTheDocument(t *testing.T) {
	p, err := faults.StartProxy(testenv.MustRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	s, _ := startServer(t, testenv.Real, "--redis-addr", p.Addr(), "--redis-timeout", "300ms", "--breaker-open-for", "200ms")
	c := newChecker(t, s)
	closed, open := testenv.Resource(t), testenv.Resource(t)
	c.do(req{method: http.MethodPut, path: "/admin/policies/" + closed, body: map[string]any{"quotaType": "TOKENS", "totalLimit": 1000}}, http.StatusCreated)
	c.do(req{method: http.MethodPut, path: "/admin/policies/" + open, body: map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "failMode": "OPEN"}}, http.StatusCreated)
	a := c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": closed, "applyAmount": 10}}, http.StatusOK)
	id := a.str(t, "sessionId")

	p.Suspend()
	unavailable := http.StatusServiceUnavailable
	for range 3 { // the first answers time out, then the breaker opens
		c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": closed, "applyAmount": 10}}, unavailable)
	}
	granted := c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": open, "applyAmount": 10}}, http.StatusOK)
	if granted.obj(t)["failOpen"] != true {
		t.Errorf("the OPEN policy's apply during the outage: %s, want failOpen", granted.body)
	}
	c.do(req{method: http.MethodPost, path: "/quota/heartbeat", body: map[string]any{"resourceName": closed, "sessionId": id}}, unavailable)
	c.do(req{method: http.MethodPost, path: "/quota/finish", body: map[string]any{"resourceName": closed, "sessionId": id, "actualUsedAmount": 5}}, unavailable)
	c.do(req{method: http.MethodGet, path: "/quota/status?resourceName=" + closed}, unavailable)
	c.do(req{method: http.MethodGet, path: "/healthz/backends"}, unavailable)
	c.do(req{method: http.MethodGet, path: "/readyz"}) // ready or not: a documented answer
	c.do(req{method: http.MethodGet, path: "/healthz"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/metrics"}, http.StatusOK)
	// Whatever the admin routes answer during the outage, the document
	// must describe it.
	pp := "/admin/policies/" + closed
	for _, r := range []req{
		{method: http.MethodGet, path: pp},
		{method: http.MethodGet, path: "/admin/policies"},
		{method: http.MethodPost, path: pp + "/reset", body: map[string]any{}},
		{method: http.MethodPost, path: "/admin/reconcile?resourceName=" + closed},
		{method: http.MethodGet, path: "/admin/sessions?resourceName=" + closed},
		{method: http.MethodPost, path: "/admin/sessions/" + id + "/finish", body: map[string]any{"resourceName": closed, "clientId": clientID}},
		{method: http.MethodGet, path: pp + "/pools"},
		{method: http.MethodPut, path: pp + "/lines/core", body: map[string]any{"tier": "CORE", "weight": 1}},
	} {
		c.do(r)
	}

	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "ready again after Redis returns", func() bool {
		return c.do(req{method: http.MethodGet, path: "/readyz"}).status == http.StatusOK
	})
}
