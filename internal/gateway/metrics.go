package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's series. Labels are bounded: domain is a
// configured domain or "unknown", resource a configured fixed resource or
// "per_value" (one resource per descriptor value would be unbounded), and
// result one of the constants below.
type Metrics struct {
	requests    *prometheus.CounterVec   // domain, result
	descriptors *prometheus.CounterVec   // domain, resource, result
	hits        *prometheus.CounterVec   // domain, resource: hits charged
	duration    *prometheus.HistogramVec // domain
}

// Results of a request (qc_gateway_requests_total) and of a descriptor
// (qc_gateway_descriptors_total).
const (
	resultOK        = "ok"
	resultOverLimit = "over_limit"
	resultShadow    = "shadow_over_limit" // a shadow mapping that would have answered OVER_LIMIT
	resultUnmatched = "unmatched"         // no mapping: OK, nothing charged
	resultRejected  = "rejected"          // a value outside the allow-list or past the cap
	resultFailOpen  = "fail_open"
	resultError     = "error" // a gRPC error status
	resultOverage   = "overage"
)

// NewMetrics registers the gateway's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qc_gateway_requests_total",
			Help: "ShouldRateLimit calls by domain and result (ok, over_limit, fail_open, error).",
		}, []string{"domain", "result"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qc_gateway_descriptors_total",
			Help: "Descriptors answered, by domain, resource (a configured one, or per_value) and result.",
		}, []string{"domain", "resource", "result"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qc_gateway_hits_charged_total",
			Help: "hits_addend charged, in the policy's unit, by domain and resource (a configured one, or per_value).",
		}, []string{"domain", "resource"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "qc_gateway_request_duration_seconds",
			Help:    "ShouldRateLimit latency in seconds, by domain.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"domain"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.descriptors, m.hits, m.duration)
	}
	return m
}

// resourceLabel is the bounded label of a matched node's resource.
func resourceLabel(d *Descriptor) string {
	if d == nil {
		return "none"
	}
	if d.perValue {
		return "per_value"
	}
	return d.Resource
}
