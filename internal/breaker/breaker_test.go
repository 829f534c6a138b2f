package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// flakyBalances is a quota.BalanceReader whose Balance answers err and
// counts calls.
type flakyBalances struct {
	err   error
	calls int
}

func (f *flakyBalances) Balance(context.Context, string, quota.Period) (quota.Balance, error) {
	f.calls++
	return quota.Balance{Exists: true}, f.err
}

// guarded calls inner's Balance through the breaker, as the service does.
type guarded struct {
	inner *flakyBalances
	b     *Breaker
}

func (g guarded) Balance(ctx context.Context, resource string, p quota.Period) (quota.Balance, error) {
	return quota.Guard(g.b, func() (quota.Balance, error) { return g.inner.Balance(ctx, resource, p) })
}

func newGuarded(t *testing.T, openFor time.Duration) (guarded, *flakyBalances, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	inner := &flakyBalances{}
	b := New("redis", Settings{Failures: 3, OpenFor: openFor}, NewMetrics(reg), zap.NewNop())
	return guarded{inner: inner, b: b}, inner, reg
}

func TestBreakerOpensAfterConsecutiveBackendFailuresAndFailsFast(t *testing.T) {
	s, inner, reg := newGuarded(t, time.Hour)
	ctx := context.Background()
	inner.err = fmt.Errorf("redis balance: %w", quota.ErrUnavailable)
	for i := range 3 {
		if _, err := s.Balance(ctx, "r", quota.Period{}); !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("call %d: %v, want the backend error", i, err)
		}
	}
	_, err := s.Balance(ctx, "r", quota.Period{})
	var coe *quota.CircuitOpenError
	if !errors.As(err, &coe) || !errors.Is(err, quota.ErrCircuitOpen) || coe.RetryAfter != time.Hour || coe.Backend != "redis" {
		t.Fatalf("4th call: %v, want a CircuitOpenError", err)
	}
	if inner.calls != 3 {
		t.Fatalf("the open breaker called the backend: %d calls, want 3", inner.calls)
	}
	want := "# HELP quota_circuit_breaker_state Circuit breaker state per backend (and Redis Cluster master, node): 0 closed, 1 half-open, 2 open.\n# TYPE quota_circuit_breaker_state gauge\nquota_circuit_breaker_state{backend=\"redis\",node=\"\"} 2\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "quota_circuit_breaker_state"); err != nil {
		t.Fatal(err)
	}
}

func TestDomainAnswersDoNotOpenTheBreaker(t *testing.T) {
	s, inner, _ := newGuarded(t, time.Hour)
	inner.err = quota.ErrSessionNotFound
	for range 10 {
		_, _ = s.Balance(context.Background(), "r", quota.Period{})
	}
	if inner.calls != 10 {
		t.Fatalf("domain errors opened the breaker: %d of 10 calls reached the backend", inner.calls)
	}
}

func TestHalfOpenProbeClosesTheBreakerAfterRecovery(t *testing.T) {
	s, inner, _ := newGuarded(t, 20*time.Millisecond)
	ctx := context.Background()
	inner.err = quota.ErrUnavailable
	for range 3 {
		_, _ = s.Balance(ctx, "r", quota.Period{})
	}
	inner.err = nil // the backend is back
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.Balance(ctx, "r", quota.Period{})
		if err == nil {
			break
		}
		if !errors.Is(err, quota.ErrCircuitOpen) || time.Now().After(deadline) {
			t.Fatalf("breaker never let a probe through: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := inner.calls
	for range 5 {
		if _, err := s.Balance(ctx, "r", quota.Period{}); err != nil {
			t.Fatalf("after a good probe the breaker must be closed: %v", err)
		}
	}
	if inner.calls != before+5 {
		t.Fatalf("closed breaker skipped calls")
	}
}
