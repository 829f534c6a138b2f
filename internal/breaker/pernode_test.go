package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// fakeNodes is a cluster's slot map: which master serves each resource.
type fakeNodes struct {
	mu      sync.Mutex
	of      map[string]string
	masters []string
}

func (f *fakeNodes) NodeOf(_ context.Context, r string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.of[r]
	if !ok {
		return "", errors.New("no slot map: no seed node answered")
	}
	return n, nil
}

func (f *fakeNodes) MasterNodes(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.masters...), nil
}

func (f *fakeNodes) move(r, to string, masters ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.of[r] = to
	f.masters = masters
}

// call makes one call about resource through p that ends with err.
func call(p *PerNode, resource string, err error) error {
	return quota.GuardErr(quota.ForResource(p, resource), func() error { return err })
}

func newPerNode(t *testing.T) (*PerNode, *fakeNodes, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	nodes := &fakeNodes{of: map[string]string{"a": "m1:6379", "b": "m2:6379"}, masters: []string{"m1:6379", "m2:6379", "m3:6379"}}
	return NewPerNode("redis", Settings{Failures: 3, OpenFor: time.Hour}, NewMetrics(reg), zap.NewNop(), nodes), nodes, reg
}

func TestAFailingMasterOpensOnlyItsOwnBreaker(t *testing.T) {
	p, _, reg := newPerNode(t)
	down := fmt.Errorf("redis apply: %w: i/o timeout", quota.ErrUnavailable)
	for range 3 {
		if err := call(p, "a", down); !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("call to a: %v, want the backend error", err)
		}
	}
	if err := call(p, "a", nil); !errors.Is(err, quota.ErrCircuitOpen) {
		t.Fatalf("a's master failed 3 times: %v, want its breaker open", err)
	}
	for range 5 {
		if err := call(p, "b", nil); err != nil {
			t.Fatalf("b is on another master: %v, want it served", err)
		}
	}
	if st := p.State(); st != "open" {
		t.Errorf("State() = %q, want open (the worst master's)", st)
	}
	want := `# HELP quota_circuit_breaker_state Circuit breaker state per backend (and Redis Cluster master, node): 0 closed, 1 half-open, 2 open.
# TYPE quota_circuit_breaker_state gauge
quota_circuit_breaker_state{backend="redis",node="m1:6379"} 2
quota_circuit_breaker_state{backend="redis",node="m2:6379"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "quota_circuit_breaker_state"); err != nil {
		t.Fatal(err)
	}
}

func TestASlotMovingIsNotCountedAsAFailure(t *testing.T) {
	p, _, _ := newPerNode(t)
	moving := fmt.Errorf("redis apply: %w: TRYAGAIN Multiple keys request during rehashing of slot", quota.ErrSlotMoving)
	for range 20 {
		if err := call(p, "a", moving); !errors.Is(err, quota.ErrSlotMoving) || !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("call while a's slot moves: %v, want the slot-moving error (an unavailable one)", err)
		}
	}
	if err := call(p, "a", nil); err != nil {
		t.Fatalf("20 slot-moving answers opened a's breaker: %v", err)
	}
}

func TestAResourceFollowsItsSlotToTheNewMastersBreaker(t *testing.T) {
	p, nodes, reg := newPerNode(t)
	down := fmt.Errorf("redis apply: %w: connection refused", quota.ErrUnavailable)
	for range 3 {
		_ = call(p, "a", down)
	}
	if err := call(p, "a", nil); !errors.Is(err, quota.ErrCircuitOpen) {
		t.Fatalf("want a's breaker open, got %v", err)
	}
	// m1 fails over: its replica m4 serves a's slot now, m1 is gone.
	nodes.move("a", "m4:6379", "m2:6379", "m3:6379", "m4:6379")
	if err := call(p, "a", nil); err != nil {
		t.Fatalf("a's new master is healthy: %v, want it served", err)
	}
	// m1's series are dropped: labels stay bounded by the masters.
	n, err := testutil.GatherAndCount(reg, "quota_circuit_breaker_state")
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d quota_circuit_breaker_state series, want 1 (m4; m1 dropped, m2 never used)", n)
	}
	if got := testutil.ToFloat64(p.m.state.WithLabelValues("redis", "m4:6379")); got != 0 {
		t.Errorf("m4's breaker state %v, want 0 (closed)", got)
	}
}

func TestACallTiedToNoResourceIsRefusedOnlyWhenEveryMasterIsOpen(t *testing.T) {
	p, _, _ := newPerNode(t)
	down := fmt.Errorf("redis: %w", quota.ErrUnavailable)
	if err := call(p, "b", nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = call(p, "a", down)
	}
	if err := quota.GuardErr(p, func() error { return nil }); err != nil {
		t.Fatalf("m2 is closed: %v, want the call let through", err)
	}
	for range 3 {
		_ = call(p, "b", down)
	}
	if err := quota.GuardErr(p, func() error { return nil }); !errors.Is(err, quota.ErrCircuitOpen) {
		t.Fatalf("every master open: %v, want ErrCircuitOpen", err)
	}
}

func TestResourcesOfAnUnknownMasterShareOneBreaker(t *testing.T) {
	p, _, reg := newPerNode(t)
	down := fmt.Errorf("redis: %w: connection refused", quota.ErrUnavailable)
	for range 3 {
		_ = call(p, "x", down) // the client knows no slot map yet
	}
	if err := call(p, "y", nil); !errors.Is(err, quota.ErrCircuitOpen) {
		t.Fatalf("y's master is unknown too: %v, want the unknown master's breaker open", err)
	}
	if got := testutil.ToFloat64(p.m.state.WithLabelValues("redis", "")); got != 2 {
		t.Errorf(`state{node=""} = %v, want 2 (open)`, got)
	}
	// The slot map arrives: a's master is known and healthy, and the
	// unknown master's breaker (no master any more) is dropped.
	if err := call(p, "a", nil); err != nil {
		t.Fatalf("a's master is known and healthy: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "quota_circuit_breaker_state"); err != nil || n != 1 {
		t.Errorf("%d quota_circuit_breaker_state series (%v), want 1: m1's (the unknown master's dropped)", n, err)
	}
}
