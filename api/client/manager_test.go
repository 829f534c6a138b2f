package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/api/client"
)

func quiet() client.ManagerOption {
	return client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestNewManagerNamesTheBadOption(t *testing.T) {
	cases := []struct {
		name string
		opt  client.ManagerOption
	}{
		{"WithTimeouts", client.WithTimeouts(time.Second, 0)}, // a zero timeout
		{"WithTimeouts", client.WithTimeouts(-time.Second, time.Second)},
		{"WithBreaker", client.WithBreaker(0, time.Second)},
		{"WithRetry", client.WithRetry(2, time.Second, time.Millisecond)},
		{"WithLeakGuard", client.WithLeakGuard(-time.Second)},
		{"WithReportInterval", client.WithReportInterval(0)},
		{"WithFallback", client.WithFallback("", client.Func(nil))},
		{"WithFallback", client.WithFallback("x", client.Fallback{})}, // an unknown fallback
		{"WithRegistry", client.WithRegistry(nil)},
		{"WithLogger", client.WithLogger(nil)},
		{"WithClientID", client.WithClientID(strings.Repeat("x", 129))},
		{"WithPoolDefaults", client.WithPoolDefaults(client.WithOutage(client.OutageSafeRate, 0))},
		{"WithBatch", client.WithPoolDefaults(client.WithBatch(-1, 1, 10))}, // a negative batch
		{"WithFailOpenSpool", client.WithFailOpenSpool("")},
	}
	for _, tc := range cases {
		_, err := client.NewManager("http://127.0.0.1:1", tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: %v, want an error naming the option", tc.name, err)
		}
	}
	if _, err := client.NewManager("ftp://x"); err == nil {
		t.Error("a bad base URL was accepted")
	}
}

func TestPoolOptionsAreChecked(t *testing.T) {
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m, _ := client.NewManager(center.URL, quiet())
	defer m.Close(context.Background())
	for _, o := range []client.PoolOption{client.WithBatch(10, 20, 30), client.WithBatch(0, 0, 1), client.WithTargetPeriod(0),
		client.WithIdleReturn(0), client.WithOutage(client.OutageMode(9), 1)} {
		if _, err := m.LocalPool("r", o); err == nil {
			t.Error("a bad pool option was accepted")
		}
	}
}

func TestPoolTakesAndReservationsRefuseMisuse(t *testing.T) {
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	m, _ := client.NewManager(center.URL, quiet())
	defer m.Close(context.Background())
	p, err := m.LocalPool("r", client.WithBatch(100, 100, 100))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Take(ctx, 0); err == nil {
		t.Error("Take(0) was accepted")
	}
	if p.TryTake(1) { // nothing held yet: TryTake starts a refill but does not wait
		t.Error("TryTake served from an empty pool")
	}
	r, err := p.Reserve(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(-1); err == nil {
		t.Error("Commit(-1) was accepted")
	}
	if err := r.Commit(4); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(4); err == nil {
		t.Error("a second Commit was accepted")
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Take(ctx, 1); !errors.Is(err, client.ErrPoolClosed) {
		t.Errorf("Take after Close: %v", err)
	}
	center.mu.Lock()
	used, open := center.used, len(center.sessions)
	center.mu.Unlock()
	if used != 4 || open != 0 {
		t.Errorf("center used %d with %d open sessions, want 4 and 0", used, open)
	}
}

func TestMetricsAreRegisteredOnTheCallersRegistry(t *testing.T) {
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	reg := prometheus.NewRegistry()
	m, err := client.NewManager(center.URL, quiet(), client.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if err := m.Do(context.Background(), "r", 5, func(context.Context) (int64, error) { return 5, nil }); err != nil {
		t.Fatal(err)
	}
	mfs, _ := reg.Gather()
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"quota_client_calls_total", "quota_client_breaker_state", "quota_client_pending_reports"} {
		if !names[n] {
			t.Errorf("%s not on the registry (have %v)", n, names)
		}
	}
	if _, err := client.NewManager(center.URL, client.WithRegistry(reg)); err == nil || !strings.Contains(err.Error(), "WithRegistry") {
		t.Errorf("a second Manager on the same registry: %v, want a WithRegistry error", err)
	}
}
