package httpapi

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The hot path's series are looked up once and kept: WithLabelValues hashes
// its label values and takes the vector's lock on every call, several
// times per request (an apply touched three vectors, plus the latency
// histogram). A resource's series live while it is active: Metrics.Retain
// deletes those of idle resources from the vectors and from the caches, so
// the caches grow with the active resources (the label rule of Metrics)
// and with the routes × methods × codes served.

// resourceSeries are one resource's counters of the apply, finish and
// heartbeat outcomes that a request increments when it succeeds.
type resourceSeries struct {
	applyGranted, applyReplayed, applyExhausted, applyFailOpen prometheus.Counter
	exhausted, failOpen                                        prometheus.Counter
	finishFinished, finishReplayed, finishRecovered            prometheus.Counter
	heartbeatOK                                                prometheus.Counter
}

// unitSeries are one resource's amount series in one unit.
type unitSeries struct {
	granted, charged, refunded, overage prometheus.Counter
	used                                prometheus.Observer
}

type unitKey struct{ resource, unit string }

type durationKey struct {
	route, method string
	code          int
}

// seriesCache holds the series already looked up; safe for concurrent use.
type seriesCache struct {
	mu        sync.RWMutex
	resources map[string]*resourceSeries
	units     map[unitKey]*unitSeries
	durations map[durationKey]prometheus.Observer
	known     map[string]struct{} // resources with series made by Known
}

func newSeriesCache() *seriesCache {
	return &seriesCache{
		known:     map[string]struct{}{},
		resources: map[string]*resourceSeries{},
		units:     map[unitKey]*unitSeries{},
		durations: map[durationKey]prometheus.Observer{},
	}
}

// resource returns the series of resource, making them on first use.
func (m *Metrics) resource(resource string) *resourceSeries {
	c := m.cache
	c.mu.RLock()
	s := c.resources[resource]
	c.mu.RUnlock()
	if s != nil {
		return s
	}
	s = &resourceSeries{
		applyGranted:    m.apply.WithLabelValues(resource, "granted"),
		applyReplayed:   m.apply.WithLabelValues(resource, "replayed"),
		applyExhausted:  m.apply.WithLabelValues(resource, "exhausted"),
		applyFailOpen:   m.apply.WithLabelValues(resource, "fail_open"),
		exhausted:       m.exhausted.WithLabelValues(resource),
		failOpen:        m.failOpen.WithLabelValues(resource),
		finishFinished:  m.finish.WithLabelValues(resource, "finished"),
		finishReplayed:  m.finish.WithLabelValues(resource, "replayed"),
		finishRecovered: m.finish.WithLabelValues(resource, "recovered"),
		heartbeatOK:     m.heartbeat.WithLabelValues(resource, "ok"),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.resources[resource]; prev != nil {
		return prev
	}
	c.resources[resource] = s
	return s
}

// unit returns resource's amount series in unit (one of quota.Units()),
// making them on first use.
func (m *Metrics) unit(resource, unit string) *unitSeries {
	c, k := m.cache, unitKey{resource, unit}
	c.mu.RLock()
	s := c.units[k]
	c.mu.RUnlock()
	if s != nil {
		return s
	}
	s = &unitSeries{
		granted:  m.granted[unit].WithLabelValues(resource),
		charged:  m.charged[unit].WithLabelValues(resource),
		refunded: m.refunded[unit].WithLabelValues(resource),
		overage:  m.overage[unit].WithLabelValues(resource),
	}
	if m.perResourceUsed {
		s.used = m.used[unit].WithLabelValues(resource)
	} else {
		s.used = m.used[unit].WithLabelValues()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.units[k]; prev != nil {
		return prev
	}
	c.units[k] = s
	return s
}

// observeDuration records one request's latency in seconds under its route
// pattern, method (already bounded) and status code.
func (m *Metrics) observeDuration(route, method string, code int, seconds float64) {
	c, k := m.cache, durationKey{route, method, code}
	c.mu.RLock()
	o := c.durations[k]
	c.mu.RUnlock()
	if o == nil {
		o = m.duration.WithLabelValues(route, method, strconv.Itoa(code))
		c.mu.Lock()
		c.durations[k] = o
		c.mu.Unlock()
	}
	o.Observe(seconds)
}
