package sdktest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// forModes runs fn on a dev-mode and a real-backend server.
func forModes(t *testing.T, fn func(t *testing.T, s *testenv.Server)) {
	for _, m := range testenv.Modes() {
		t.Run(string(m), func(t *testing.T) { fn(t, testenv.Start(t, m)) })
	}
}

// admin returns a plain client with the server's admin token.
func admin(t *testing.T, s *testenv.Server) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, client.WithAdminToken(s.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// policy creates a policy on a fresh resource name and returns the name.
func policy(t *testing.T, s *testenv.Server, spec client.PolicySpec) string {
	t.Helper()
	spec.ResourceName = testenv.Resource(t)
	if _, err := admin(t, s).PutPolicy(context.Background(), spec); err != nil {
		t.Fatalf("put policy: %v", err)
	}
	return spec.ResourceName
}

func status(t *testing.T, s *testenv.Server, r string) *client.QuotaStatus {
	t.Helper()
	st, err := admin(t, s).Status(context.Background(), r)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// manager builds a Manager on url, closed at the end of the test.
func manager(t *testing.T, url string, opts ...client.ManagerOption) *client.Manager {
	t.Helper()
	opts = append([]client.ManagerOption{client.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	m, err := client.NewManager(url, opts...)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

// proxy stands between the SDK and the center. Down makes it answer 502
// without forwarding; a queued rule answers one matching request itself
// or drops the center's answer to it.
type proxy struct {
	URL   string
	down  atomic.Bool
	hbOff atomic.Bool // heartbeats only: answered 502 without forwarding
	mu    sync.Mutex
	rules []rule
	log   []hit
}

type hit struct {
	path      string
	at        time.Time
	forwarded bool
}

type rule struct {
	path       string
	status     int    // answer this status without forwarding
	retryAfter string // with this Retry-After
	dropAnswer bool   // forward, then fail the client's connection
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &proxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		var ru *rule
		for i := range p.rules {
			if strings.HasPrefix(r.URL.Path, p.rules[i].path) {
				x := p.rules[i]
				ru = &x
				p.rules = append(p.rules[:i], p.rules[i+1:]...)
				break
			}
		}
		down := p.down.Load() || (p.hbOff.Load() && strings.HasPrefix(r.URL.Path, "/quota/heartbeat"))
		p.log = append(p.log, hit{path: r.URL.Path, at: time.Now(), forwarded: !down && (ru == nil || ru.dropAnswer)})
		p.mu.Unlock()
		switch {
		case down:
			w.WriteHeader(http.StatusBadGateway)
		case ru != nil && ru.dropAnswer:
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			panic(http.ErrAbortHandler) // the center acted; the client sees a broken connection
		case ru != nil:
			if ru.retryAfter != "" {
				w.Header().Set("Retry-After", ru.retryAfter)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ru.status)
			_, _ = io.WriteString(w, `{"success":false,"code":"BACKEND_UNAVAILABLE","message":"proxy says so"}`)
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

func (p *proxy) add(r rule) {
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
}

// hits returns the requests seen on paths starting with prefix.
func (p *proxy) hits(prefix string) []hit {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []hit
	for _, h := range p.log {
		if strings.HasPrefix(h.path, prefix) {
			out = append(out, h)
		}
	}
	return out
}

// ledgerRows counts the resource's ledger rows in status st.
func ledgerRows(t *testing.T, s *testenv.Server, r, st string) int {
	t.Helper()
	var n int
	if err := s.Ledger.QueryRow(`SELECT COUNT(*) FROM quota_usage WHERE resource_name = ? AND status = ?`, r, st).Scan(&n); err != nil {
		t.Fatalf("ledger: %v", err)
	}
	return n
}

// prometheusCounter sums the series of the named metric family in reg as
// a collector for testutil.
func prometheusCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum_of_" + name, Help: "test"})
	g.Set(sum)
	return g
}
