package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// assertUnavailable checks a 503 BACKEND_UNAVAILABLE answer and its
// Retry-After.
func assertUnavailable(t *testing.T, r reply) {
	t.Helper()
	assertError(t, r, http.StatusServiceUnavailable, "BACKEND_UNAVAILABLE")
	if secs, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("Retry-After = %q, want whole seconds ≥ 1", r.header.Get("Retry-After"))
	}
	// The answer goes to unauthenticated callers: no backend address or
	// driver error on the wire (the log has them).
	if msg := string(r.raw); strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "dial") || strings.Contains(msg, "tcp") {
		t.Errorf("503 body reveals the backend: %s", msg)
	}
}

func TestUnreachableRedisAnswers503(t *testing.T) {
	sql := newSQLite(t)
	now := time.Now().UTC()
	if _, _, err := sql.PutPolicy(t.Context(), quota.Policy{
		ResourceName: res, QuotaType: quota.TypeTokens, TotalLimit: 1000, ResetCron: "@daily",
		Timezone: "UTC", LeakThresholdSeconds: 300, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		t.Fatalf("put policy: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	h := startAPI(t, stores{balances: redisstore.New(rdb), ledger: sql, policies: sql}, zap.NewNop())

	for _, c := range []struct {
		name string
		req  request
		hint string // what the message says to send again
	}{
		{"apply answers 503", apply.req(obj(apply.fields...)), "retry the apply with the same sessionId"},
		{"apply with a client-given session id answers 503", apply.req(apply.with("sessionId", str("s-1"))), "retry the apply with the same sessionId"},
		{"heartbeat answers 503", heartbeat.req(obj(heartbeat.fields...)), "retry the heartbeat"},
		{"finish answers 503", finish.req(obj(finish.fields...)), "retry the finish with the same sessionId and actualUsedAmount"},
		{"status answers 503", request{method: http.MethodGet, path: "/quota/status?resourceName=" + res}, "retry the request"},
		{"PUT policy answers 503 as its limit cannot go live", putPolicy.req(obj(putPolicy.fields...)), "retry the request"},
	} {
		t.Run(c.name+" while Redis is unreachable", func(t *testing.T) {
			r := h.do(t, c.req)
			assertUnavailable(t, r)
			// A finish's or heartbeat's 503 told the caller to send an
			// apply again (review of 4 December).
			if msg, _ := r.body["message"].(string); !strings.HasSuffix(msg, c.hint) &&
				!strings.Contains(msg, c.hint+" (") {
				t.Errorf("message %q, want the advice %q", msg, c.hint)
			}
		})
	}
	t.Run("an unknown resource is still 404, not 503, while Redis is unreachable", func(t *testing.T) {
		r := h.do(t, apply.req(apply.with("resourceName", str(unknown))))
		assertError(t, r, http.StatusNotFound, "RESOURCE_NOT_FOUND")
	})
	t.Run("policies stay readable while Redis is unreachable", func(t *testing.T) {
		h.mustOK(t, request{method: http.MethodGet, path: "/admin/policies/" + res})
	})
	t.Run("the failures are counted as errors of the known resource only", func(t *testing.T) {
		samples := h.scrape(t)
		for _, m := range []string{"quota_apply_total", "quota_heartbeat_total", "quota_finish_total"} {
			if v, ok := find(samples, m, map[string]string{"resource": res, "result": "error"}); !ok || v < 1 {
				t.Errorf("%s{resource=%q,result=\"error\"} = %v (present %v), want ≥ 1", m, res, v, ok)
			}
		}
		for _, s := range samples {
			if v, ok := s.labels["resource"]; ok && v != res {
				t.Errorf("series %s%v names resource %q, which has no policy", s.name, s.labels, v)
			}
		}
	})
}

func TestPolicyStoreOutageCreatesNoSeries(t *testing.T) {
	policies, ledger := newSQLite(t), newSQLite(t)
	h := startAPI(t, stores{balances: redisstore.New(newMiniredis(t)), ledger: ledger, policies: policies}, zap.NewNop())
	if err := policies.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"made-up-a", "made-up-b", "made-up-c"} {
		for _, e := range []endpoint{apply, heartbeat, finish} {
			t.Run(e.name+" on "+name+" answers 503 while policies cannot be read", func(t *testing.T) {
				assertUnavailable(t, h.do(t, e.req(e.with("resourceName", str(name)))))
			})
		}
	}
	t.Run("no series names any of those resources", func(t *testing.T) {
		for _, s := range h.scrape(t) {
			if v, ok := s.labels["resource"]; ok {
				t.Errorf("series %s%v names resource %q, whose policy was never read", s.name, s.labels, v)
			}
		}
	})
}

func TestClosedLedgerAnswers503AndGivesTheReservationBack(t *testing.T) {
	// Policies and the ledger are two stores, so policies stay readable
	// while the ledger is down.
	policies, ledger := newSQLite(t), newSQLite(t)
	h := startAPI(t, stores{balances: redisstore.New(newMiniredis(t)), ledger: ledger, policies: policies}, zap.NewNop())
	h.putPolicy(t, res, obj(putPolicy.fields...))
	h.mustOK(t, apply.req(apply.with("sessionId", str("live-1"))))
	before := h.status(t, res).raw // seeds the period's balance from the ledger
	if err := ledger.Close(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, body string }{
		{"apply with a server-made session id", obj(apply.fields...)},
		{"apply with a client-given session id", apply.with("sessionId", str("new-1"))},
		{"a retry of that apply", apply.with("sessionId", str("new-1"))},
		{"apply with minAmount", apply.with("minAmount", "1")},
		{"apply repeating a session the ledger holds", apply.with("sessionId", str("live-1"))},
	} {
		t.Run(c.name+" answers 503 and gives the reservation back", func(t *testing.T) {
			assertUnavailable(t, h.do(t, apply.req(c.body)))
			if after := h.status(t, res).raw; !bytes.Equal(before, after) {
				t.Errorf("the failed apply changed the balance:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	t.Run("policies stay readable while the ledger is down", func(t *testing.T) {
		h.mustOK(t, request{method: http.MethodGet, path: "/admin/policies/" + res})
	})
}

// panickingPolicies panics on every read, with a message that must not
// reach the client.
type panickingPolicies struct{ quota.PolicyStore }

const secret = "dsn=root:hunter2@tcp(db:3306)"

func (panickingPolicies) GetPolicy(context.Context, string) (quota.Policy, error) {
	panic("policy cache corrupted: " + secret)
}

func TestPanicAnswers500WithoutLeakingIt(t *testing.T) {
	sql := newSQLite(t)
	core, logs := observer.New(zap.ErrorLevel)
	h := startAPI(t, stores{balances: redisstore.New(newMiniredis(t)), ledger: sql, policies: panickingPolicies{sql}}, zap.New(core))

	for _, c := range []struct {
		name, route string
		req         request
	}{
		{"apply", "/quota/apply", apply.req(obj(apply.fields...))},
		{"heartbeat", "/quota/heartbeat", heartbeat.req(obj(heartbeat.fields...))},
		{"finish", "/quota/finish", finish.req(obj(finish.fields...))},
		{"status", "/quota/status", request{method: http.MethodGet, path: "/quota/status?resourceName=" + res}},
		{"GET policy", "/admin/policies/{resourceName}", request{method: http.MethodGet, path: "/admin/policies/" + res}},
	} {
		t.Run(c.name+" answers 500 INTERNAL_ERROR when its handler panics", func(t *testing.T) {
			logs.TakeAll()
			r := h.do(t, c.req)
			assertError(t, r, http.StatusInternalServerError, "INTERNAL_ERROR")
			if bytes.Contains(r.raw, []byte("hunter2")) || bytes.Contains(r.raw, []byte("panic")) {
				t.Errorf("the body leaks the panic: %s", r.raw)
			}
			if got := logs.FilterMessage("request failed").All(); len(got) != 1 ||
				!strings.Contains(got[0].ContextMap()["error"].(string), secret) {
				t.Errorf("want one error log carrying the panic, got %v", logs.All())
			}
			if _, ok := find(h.scrape(t), "quota_http_request_duration_seconds_count",
				map[string]string{"route": c.route, "method": c.req.method, "code": "500"}); !ok {
				t.Errorf("the 500 of %s is missing from quota_http_request_duration_seconds", c.route)
			}
		})
	}
	t.Run("the server keeps serving after the panics", func(t *testing.T) {
		h.mustOK(t, request{method: http.MethodGet, path: "/healthz"})
	})
}
