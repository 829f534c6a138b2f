package httpapi

import "github.com/prometheus/client_golang/prometheus"

// Resources are the resources that have request series on this instance
// (made by a request or by Known), in no order.
func (m *Metrics) Resources() []string {
	c := m.cache
	c.mu.RLock()
	defer c.mu.RUnlock()
	set := make(map[string]struct{}, len(c.known)+len(c.resources))
	for r := range c.known {
		set[r] = struct{}{}
	}
	for r := range c.resources {
		set[r] = struct{}{}
	}
	for k := range c.units {
		set[k.resource] = struct{}{}
	}
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	return out
}

// Retain deletes the request series of every resource keep rejects (an
// idle one; issue 23 §1: per-resource series only for active resources),
// and returns the resources it deleted. A deleted counter that comes back
// starts again at 0, which rate() and increase() read as a counter reset.
// A request in flight for a resource being deleted may recreate one of its
// series; the next Retain deletes it again.
func (m *Metrics) Retain(keep func(resource string) bool) []string {
	var gone []string
	for _, r := range m.Resources() {
		if !keep(r) {
			m.forget(r)
			gone = append(gone, r)
		}
	}
	return gone
}

// forget deletes resource's series from the caches, then from the vectors.
func (m *Metrics) forget(resource string) {
	c := m.cache
	c.mu.Lock()
	delete(c.known, resource)
	delete(c.resources, resource)
	for k := range c.units {
		if k.resource == resource {
			delete(c.units, k)
		}
	}
	c.mu.Unlock()
	// By exact label values: DeletePartialMatch scans every series of the
	// vector, so deleting many resources at once was quadratic.
	for v, results := range map[*prometheus.CounterVec][]string{m.apply: applyResults, m.finish: finishResults, m.heartbeat: heartbeatResults} {
		for _, res := range results {
			v.DeleteLabelValues(resource, res)
		}
	}
	m.exhausted.DeleteLabelValues(resource)
	m.failOpen.DeleteLabelValues(resource)
	// Pooled resources' refusals only: a small vector, so a partial match.
	m.refusals.DeletePartialMatch(prometheus.Labels{"resource": resource})
	for _, u := range []map[string]*prometheus.CounterVec{m.granted, m.charged, m.refunded, m.overage} {
		for _, v := range u {
			v.DeleteLabelValues(resource)
		}
	}
	if m.perResourceUsed {
		for _, v := range m.used {
			v.DeleteLabelValues(resource)
		}
	}
}
