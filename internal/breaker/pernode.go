package breaker

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Nodes tells which master serves a resource (internal/redisstore's Store
// on a Redis Cluster).
type Nodes interface {
	// NodeOf is the address of the master serving resource's keys now.
	NodeOf(ctx context.Context, resource string) (string, error)
	// MasterNodes lists the addresses of the masters now.
	MasterNodes(ctx context.Context) ([]string, error)
}

// PerNode is the balance store's breaker on a Redis Cluster: one Breaker
// per master, so that a failing master (or a slow one) fails fast for the
// resources whose slots it serves while the resources of the other masters
// are served (issue 22, item 6). Each call is judged by the breaker of the
// master serving its resource at the time of the call (For): when a slot
// moves or a replica takes over, the resource follows to the breaker of its
// new master. Breakers of addresses that are no longer masters are dropped
// (with their metric series) when a new master is first seen, so the
// metric labels stay bounded by the masters.
//
// A resource whose master is not known (the client has no slot map: no
// seed node answered yet) is judged by the breaker of node "".
type PerNode struct {
	name  string
	s     Settings
	m     *Metrics
	log   *zap.Logger
	nodes Nodes

	mu    sync.RWMutex
	byAdr map[string]*Breaker
}

// NewPerNode makes the per-master breakers of backend name ("redis"), each
// with s, whose masters nodes tells.
func NewPerNode(name string, s Settings, m *Metrics, log *zap.Logger, nodes Nodes) *PerNode {
	return &PerNode{name: name, s: s.withDefaults(), m: m, log: log, nodes: nodes, byAdr: map[string]*Breaker{}}
}

// For implements quota.NodeBreaker: the breaker of the master serving
// resource now.
func (p *PerNode) For(resource string) quota.Breaker {
	addr, err := p.nodes.NodeOf(context.Background(), resource)
	if err != nil {
		addr = ""
	}
	return p.node(addr)
}

// node is addr's breaker, made at its first use.
func (p *PerNode) node(addr string) *Breaker {
	p.mu.RLock()
	b, ok := p.byAdr[addr]
	p.mu.RUnlock()
	if ok {
		return b
	}
	p.mu.Lock()
	b, ok = p.byAdr[addr]
	if !ok {
		b = newBreaker(p.name, addr, p.s, p.m, p.log)
		p.byAdr[addr] = b
	}
	p.mu.Unlock()
	if !ok && addr != "" {
		p.prune(addr)
	}
	return b
}

// prune drops the breakers of addresses that are no longer masters (a
// failed master, a node whose slots all moved away), keeping keep's.
func (p *PerNode) prune(keep string) {
	masters, err := p.nodes.MasterNodes(context.Background())
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, b := range p.byAdr {
		if addr == keep || slices.Contains(masters, addr) {
			continue
		}
		b.gone.Store(true)
		delete(p.byAdr, addr)
		p.m.state.DeleteLabelValues(p.name, addr)
		p.m.transitions.DeletePartialMatch(prometheus.Labels{"backend": p.name, "node": addr})
	}
}

// Allow implements quota.Breaker for a call tied to no resource (none of
// the balance store's calls is today): it goes ahead unless every known
// master's breaker is open, and its outcome is not counted.
func (p *PerNode) Allow() (func(error), error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, b := range p.byAdr {
		if b.State() != "open" {
			return func(error) {}, nil
		}
	}
	if len(p.byAdr) == 0 {
		return func(error) {}, nil
	}
	return nil, &quota.CircuitOpenError{Backend: p.name, RetryAfter: p.s.OpenFor}
}

// State is the worst state among the masters' breakers: "open" when one
// is open, else "half-open" when one is, else "closed".
func (p *PerNode) State() string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	worst := "closed"
	for _, b := range p.byAdr {
		switch st := b.State(); st {
		case "open":
			return st
		case "half-open":
			worst = st
		}
	}
	return worst
}

var _ quota.NodeBreaker = (*PerNode)(nil)
