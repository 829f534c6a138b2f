package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// serviceLB stands in for a Kubernetes Service (or any load balancer that
// polls readiness): it probes the instance's /readyz every 100ms and sends
// traffic to it only while the last probe answered 200. With no ready
// endpoint it answers 502, as a client of an empty Service gets nothing.
type serviceLB struct {
	target    *url.URL
	ready     atomic.Bool
	notReady  atomic.Int64 // probes that did not answer 200
	probes    atomic.Int64
	proxy     *httputil.ReverseProxy
	stop      chan struct{}
	stopped   sync.WaitGroup
	probeHTTP *http.Client
}

func newServiceLB(t *testing.T, instance string) *httptest.Server {
	u, err := url.Parse(instance)
	if err != nil {
		t.Fatal(err)
	}
	lb := &serviceLB{target: u, proxy: httputil.NewSingleHostReverseProxy(u), stop: make(chan struct{}),
		probeHTTP: &http.Client{Timeout: time.Second}}
	lb.probe()
	lb.stopped.Add(1)
	go func() {
		defer lb.stopped.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-lb.stop:
				return
			case <-tick.C:
				lb.probe()
			}
		}
	}()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lb.ready.Load() {
			http.Error(w, "no ready endpoints", http.StatusBadGateway)
			return
		}
		lb.proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		close(lb.stop)
		lb.stopped.Wait()
		if n := lb.notReady.Load(); n > 0 {
			t.Errorf("the instance failed %d of %d readiness probes: a backend outage took it out of the Service", n, lb.probes.Load())
		}
	})
	return srv
}

func (lb *serviceLB) probe() {
	lb.probes.Add(1)
	resp, err := lb.probeHTTP.Get(lb.target.String() + "/readyz")
	ok := err == nil && resp.StatusCode == http.StatusOK
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if !ok {
		lb.notReady.Add(1)
	}
	lb.ready.Store(ok)
}

func postJSON(t *testing.T, url string, body map[string]any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: %d %q is not quota-center's JSON", url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// TestOutageKeepsTheInstanceInItsService stops the private Redis, then the
// private MariaDB, behind a readiness-polling load balancer: the instance
// stays ready the whole time, so clients keep getting quota-center's own
// answers through the Service — 503 for a failMode CLOSED policy, a
// fail-open grant for an OPEN one — and /healthz/backends shows the outage.
func TestOutageKeepsTheInstanceInItsService(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := faults.StartEnv(ctx, faults.EnvOptions{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		fatalOrSkip(t, "start environment", err)
	}
	t.Cleanup(func() { _ = env.Close() })
	for name, mode := range map[string]string{"svc-closed": "CLOSED", "svc-open": "OPEN"} {
		if err := env.Admin(ctx, http.MethodPut, "/admin/policies/"+name, map[string]any{
			"quotaType": "COUNT", "totalLimit": 1000, "failMode": mode,
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lb := newServiceLB(t, env.URL)
	apply := func(res string) (int, map[string]any) {
		return postJSON(t, lb.URL+"/quota/apply", map[string]any{"resourceName": res, "applyAmount": 1, "clientId": "svc-test"})
	}
	for _, res := range []string{"svc-closed", "svc-open"} {
		if code, out := apply(res); code != http.StatusOK || out["failOpen"] == true {
			t.Fatalf("apply %s before the outage: %d %v", res, code, out)
		}
	}
	backend := func(name string) string {
		_, body := getBody(t, env.URL+"/healthz/backends")
		for _, b := range body["backends"].([]any) {
			if m := b.(map[string]any); m["name"] == name {
				return m["status"].(string)
			}
		}
		return ""
	}

	for _, outage := range []struct {
		name       string
		stop       func() error
		start      func(context.Context) error
		backend    string
		closedCode map[string]bool
	}{
		{"redis", env.Redis.Stop, env.Redis.Start, "redis", map[string]bool{"BACKEND_UNAVAILABLE": true, "CIRCUIT_BREAKER_OPEN": true}},
		{"mariadb", env.MariaDB.Stop, env.MariaDB.Start, "mysql", map[string]bool{"BACKEND_UNAVAILABLE": true, "CIRCUIT_BREAKER_OPEN": true}},
	} {
		t.Run(outage.name, func(t *testing.T) {
			if err := outage.stop(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, outage.backend+" down on /healthz/backends", func() bool { return backend(outage.backend) == "down" })
			if code, _ := getBody(t, env.URL+"/healthz/backends"); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz/backends answered %d with %s down", code, outage.backend)
			}
			for range 8 { // enough to open the breaker (5 failures)
				code, out := apply("svc-closed")
				if code != http.StatusServiceUnavailable || !outage.closedCode[out["code"].(string)] {
					t.Fatalf("CLOSED apply through the Service with %s down: %d %v", outage.name, code, out)
				}
				code, out = apply("svc-open")
				if code != http.StatusOK || out["failOpen"] != true {
					t.Fatalf("OPEN apply through the Service with %s down: %d %v", outage.name, code, out)
				}
			}
			if code, body := getBody(t, lb.URL+"/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz through the Service with %s down: %d %v", outage.name, code, body)
			}
			if err := outage.start(ctx); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 30*time.Second, outage.backend+" up again", func() bool { return backend(outage.backend) == "up" })
			testenv.Eventually(t, 30*time.Second, "CLOSED applies granted again", func() bool {
				code, _ := apply("svc-closed")
				return code == http.StatusOK
			})
		})
	}
}

func getBody(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("GET %s: %d, not JSON: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}
