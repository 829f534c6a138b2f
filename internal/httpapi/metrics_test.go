package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

func TestMetricsAfterTraffic(t *testing.T) {
	h := newHarness(t)
	const client, sess = "billing-svc-7", "sess-secret-42"
	h.putPolicy(t, res, obj(putPolicy.fields...))
	h.mustOK(t, apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "100"), kv("clientId", str(client)), kv("sessionId", str(sess)))))
	h.mustOK(t, heartbeat.req(obj(kv("resourceName", str(res)), kv("sessionId", str(sess)))))
	h.mustOK(t, finish.req(obj(kv("resourceName", str(res)), kv("sessionId", str(sess)), kv("actualUsedAmount", "40"))))
	live := h.mustOK(t, apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "50"), kv("clientId", str(client)))))
	liveID := live.body["sessionId"].(string)
	h.mustOK(t, request{method: http.MethodGet, path: "/admin/policies/" + res})
	h.do(t, request{method: http.MethodGet, path: "/no/such/route"})
	h.do(t, request{method: http.MethodDelete, path: "/admin/policies/" + res})
	samples := h.scrape(t)

	t.Run("granted applies are counted by resource and result", func(t *testing.T) {
		if v, ok := find(samples, "quota_apply_total", map[string]string{"resource": res, "result": "granted"}); !ok || v != 2 {
			t.Errorf("quota_apply_total{granted} = %v (present %v), want 2", v, ok)
		}
		if v, ok := find(samples, "quota_granted_tokens_total", map[string]string{"resource": res}); !ok || v != 150 {
			t.Errorf("quota_granted_tokens_total = %v (present %v), want 150", v, ok)
		}
		if v, ok := find(samples, "quota_refunded_tokens_total", map[string]string{"resource": res}); !ok || v != 60 {
			t.Errorf("quota_refunded_tokens_total = %v (present %v), want 60", v, ok)
		}
	})

	t.Run("the remaining gauge follows the balance at every scrape", func(t *testing.T) {
		for _, step := range []struct {
			name string
			do   func(t *testing.T)
		}{
			{"after traffic", func(*testing.T) {}},
			{"after an apply", func(t *testing.T) {
				h.mustOK(t, apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "200"))))
			}},
			{"after a finish refunds", func(t *testing.T) {
				h.mustOK(t, finish.req(obj(kv("resourceName", str(res)), kv("sessionId", str(liveID)), kv("actualUsedAmount", "5"))))
			}},
			{"after an overage", func(t *testing.T) {
				a := h.mustOK(t, apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "10"))))
				h.mustOK(t, finish.req(obj(kv("resourceName", str(res)), kv("sessionId", str(a.body["sessionId"].(string))), kv("actualUsedAmount", "900"))))
			}},
			{"after the limit is raised", func(t *testing.T) {
				h.putPolicy(t, res, putPolicy.with("totalLimit", "5000"))
			}},
		} {
			t.Run(step.name, func(t *testing.T) {
				step.do(t)
				want := num(t, h.status(t, res), "remainingQuota")
				got, ok := find(h.scrape(t), "quota_remaining_tokens", map[string]string{"resource": res})
				if !ok || got != float64(want) {
					t.Errorf("quota_remaining_tokens = %v (present %v), status remainingQuota = %d", got, ok, want)
				}
			})
		}
	})

	t.Run("request latency is labelled by the chi route pattern, never the raw path", func(t *testing.T) {
		patterns := map[string]bool{"unmatched": true}
		_ = chi.Walk(h.srv.Routes(), func(_, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			patterns[route] = true
			return nil
		})
		seen := map[string]bool{}
		for _, s := range samples {
			if s.name != "quota_http_request_duration_seconds_count" {
				continue
			}
			route := s.labels["route"]
			seen[route] = true
			if !patterns[route] {
				t.Errorf("route label %q is not a chi pattern: %v", route, s.labels)
			}
		}
		for _, want := range []string{"/admin/policies/{resourceName}", "/quota/apply", "/quota/heartbeat", "/quota/finish", "unmatched"} {
			if !seen[want] {
				t.Errorf("no latency series for route %q; have %v", want, seen)
			}
		}
		if v, ok := find(samples, "quota_http_request_duration_seconds_count",
			map[string]string{"route": "/admin/policies/{resourceName}", "method": "PUT", "code": "201"}); !ok || v != 1 {
			t.Errorf("PUT /admin/policies/{resourceName} 201 count = %v (present %v), want 1", v, ok)
		}
	})

	t.Run("no series carries a client or session label or value", func(t *testing.T) {
		for _, s := range h.scrape(t) {
			for k, v := range s.labels {
				lk := strings.ToLower(k)
				if strings.Contains(lk, "client") || strings.Contains(lk, "session") {
					t.Errorf("%s has label %s=%q", s.name, k, v)
				}
				if v == client || v == sess || v == liveID {
					t.Errorf("%s carries the client or session %q in label %s", s.name, v, k)
				}
			}
		}
	})
}

// A request the server refuses (a 4xx other than 429) counts as
// "rejected", not "error": "error" is the server's own failures (5xx,
// TestUnreachableRedisAnswers503), what alerts and the dashboard read as such.
func TestRefusalsAreCountedAsRejected(t *testing.T) {
	h := newHarness(t)
	h.putPolicy(t, res, obj(putPolicy.fields...))
	h.mustOK(t, apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "100"), kv("sessionId", str("s-reused")))))
	r := h.do(t, apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "7"), kv("sessionId", str("s-reused")))))
	assertError(t, r, http.StatusConflict, "SESSION_CONFLICT")
	r = h.do(t, finish.req(obj(kv("resourceName", str(res)), kv("sessionId", str("s-never")), kv("actualUsedAmount", "1"))))
	assertError(t, r, http.StatusNotFound, "SESSION_NOT_FOUND")
	samples := h.scrape(t)
	for _, c := range []struct {
		metric, result string
		want           float64
	}{
		{"quota_apply_total", "rejected", 1},
		{"quota_apply_total", "error", 0},
		{"quota_finish_total", "rejected", 1},
		{"quota_finish_total", "error", 0},
	} {
		if v, ok := find(samples, c.metric, map[string]string{"resource": res, "result": c.result}); !ok || v != c.want {
			t.Errorf("%s{result=%q} = %v (present %v), want %v", c.metric, c.result, v, ok, c.want)
		}
	}
}
