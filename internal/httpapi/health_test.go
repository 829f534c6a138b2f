package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/quotacenter/quota-center/internal/httpapi"
)

func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("GET %s: %s", url, raw)
	}
	return resp.StatusCode, out
}

// With a backend down the instance stays ready (it answers 503s or grants
// fail-open, as each policy says); /healthz/backends is where the outage
// shows; draining is the one thing that makes it not ready.
func TestReadinessIgnoresBackendsAndBackendHealthShowsThem(t *testing.T) {
	var redisDown atomic.Bool
	srv := httpapi.New(httpapi.Deps{
		Backends: func(context.Context) []httpapi.BackendHealth {
			breaker := "closed"
			if redisDown.Load() {
				breaker = "open"
			}
			return []httpapi.BackendHealth{
				{Name: "redis", Up: !redisDown.Load(), Breaker: breaker},
				{Name: "mysql", Up: true, Breaker: "closed"},
			}
		},
	})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	code, body := getJSON(t, ts.URL+"/healthz/backends")
	if code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("backends up: %d %v", code, body)
	}

	redisDown.Store(true)
	if code, body := getJSON(t, ts.URL+"/readyz"); code != http.StatusOK || body["status"] != "ready" {
		t.Fatalf("/readyz with Redis down: %d %v", code, body)
	}
	code, body = getJSON(t, ts.URL+"/healthz/backends")
	if code != http.StatusServiceUnavailable || body["status"] != "degraded" {
		t.Fatalf("/healthz/backends with Redis down: %d %v", code, body)
	}
	list, _ := body["backends"].([]any)
	if len(list) != 2 {
		t.Fatalf("backends %v", body["backends"])
	}
	redis, _ := list[0].(map[string]any)
	if redis["name"] != "redis" || redis["status"] != "down" || redis["breaker"] != "open" {
		t.Errorf("redis entry %v", redis)
	}
	if mysql, _ := list[1].(map[string]any); mysql["status"] != "up" {
		t.Errorf("mysql entry %v", mysql)
	}

	srv.Drain()
	if code, body := getJSON(t, ts.URL+"/readyz"); code != http.StatusServiceUnavailable || body["reason"] != "shutting down" {
		t.Fatalf("/readyz while draining: %d %v", code, body)
	}
}
