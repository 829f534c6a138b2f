package app_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// stoppedRedis is a private redis-server, stopped: its port does not
// listen until the test starts it again (Start).
func stoppedRedis(t *testing.T) *faults.Redis {
	t.Helper()
	r, err := faults.StartRedis(context.Background(), t.TempDir(), t.Logf)
	if errors.Is(err, faults.ErrMissingBinary) && !testenv.Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	return r
}

// Issue 22 §11: a server started while Redis was unreachable exited
// ("connect redis …: connection refused"), so a pod restarted during a Redis
// outage crash-looped and its fail-open policies stopped working exactly
// when they mattered. It starts; an OPEN policy's apply is granted
// fail-open, a CLOSED one's is 503 with a JSON error, Redis-only work (a
// heartbeat) is 503; /readyz is 200 as with any Redis outage (the instance
// answers correctly, docs/operations.md), /healthz/backends says Redis is
// down. Once Redis listens, the same instance grants normally and reports
// Redis up, without a restart.
func TestServeStartsWhileRedisIsDownAndConnectsWhenItReturns(t *testing.T) {
	testenv.MustMySQL(t)
	rs := stoppedRedis(t)
	s := testenv.Start(t, testenv.Real, "--redis-addr", rs.Addr(), "--breaker-open-for", "200ms",
		"--redis-timeout", "300ms")
	open, closed := testenv.Resource(t), testenv.Resource(t)
	for name, mode := range map[string]string{open: "OPEN", closed: "CLOSED"} {
		// Stored in MySQL; its limit cannot be set in Redis yet (503, or
		// 200 if it was): the first apply once Redis is back seeds it.
		code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+name,
			map[string]any{"quotaType": "COUNT", "totalLimit": 100, "failMode": mode})
		if code != http.StatusOK && code != http.StatusCreated && code != http.StatusServiceUnavailable {
			t.Fatalf("PUT %s while Redis is down: %d %v", name, code, out)
		}
	}
	apply := func(name string) (int, map[string]any) {
		t.Helper()
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": name, "applyAmount": 10})
		return code, out
	}
	code, fo := apply(open)
	if code != http.StatusOK || fo["failOpen"] != true || num(t, fo, "grantedAmount") != 10 {
		t.Fatalf("OPEN apply with Redis down since the start: %d %v, want 200 granted fail-open", code, fo)
	}
	code, out := apply(closed)
	if code != http.StatusServiceUnavailable || (out["code"] != "BACKEND_UNAVAILABLE" && out["code"] != "CIRCUIT_BREAKER_OPEN") {
		t.Fatalf("CLOSED apply with Redis down since the start: %d %v, want 503 with a JSON error", code, out)
	}
	code, out, _ = call(t, s, http.MethodPost, "/quota/heartbeat", map[string]any{"resourceName": open, "sessionId": fo["sessionId"]})
	if code != http.StatusServiceUnavailable || out["code"] == nil {
		t.Fatalf("heartbeat with Redis down: %d %v, want 503 with a JSON error", code, out)
	}
	if code, out, _ := call(t, s, http.MethodGet, "/readyz", nil); code != http.StatusOK {
		t.Fatalf("/readyz with Redis down: %d %v, want 200 (it answers as each policy says)", code, out)
	}
	if code, out, _ := call(t, s, http.MethodGet, "/healthz/backends", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz/backends with Redis down: %d %v, want 503", code, out)
	}

	if err := rs.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "a CLOSED apply granted once Redis listens", func() bool {
		code, out := apply(closed)
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("CLOSED apply after Redis returned: %d %v", code, out)
		}
		return code == http.StatusOK && out["failOpen"] == nil && num(t, out, "grantedAmount") == 10
	})
	code, out = apply(open)
	if code != http.StatusOK || out["failOpen"] != nil {
		t.Fatalf("OPEN apply after Redis returned: %d %v, want a normal grant", code, out)
	}
	if code, out, _ := call(t, s, http.MethodGet, "/healthz/backends", nil); code != http.StatusOK {
		t.Fatalf("/healthz/backends after Redis returned: %d %v", code, out)
	}
	if code, _, _ := call(t, s, http.MethodGet, "/readyz", nil); code != http.StatusOK {
		t.Fatalf("/readyz after Redis returned: %d", code)
	}
}
