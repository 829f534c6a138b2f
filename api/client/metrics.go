package client

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the SDK's client-side Prometheus metrics, registered by
// WithRegistry. Names and meanings are listed in docs/sdk.md.
type metrics struct {
	calls        *prometheus.CounterVec // quota_client_calls_total{op,result}
	breakerState prometheus.Gauge       // quota_client_breaker_state
	fallbacks    *prometheus.CounterVec // quota_client_fallbacks_total{resource,mode}
	leakGuard    *prometheus.CounterVec // quota_client_leak_guard_total{resource}
	pending      prometheus.Gauge       // quota_client_pending_reports
	reports      *prometheus.CounterVec // quota_client_reports_total{result}
	takes        *prometheus.CounterVec // quota_client_pool_takes_total{resource,result}
	takeUnits    *prometheus.CounterVec // quota_client_pool_take_units_total{resource}
	refills      *prometheus.CounterVec // quota_client_pool_refills_total{resource,result}
	fallbackSecs *prometheus.CounterVec // quota_client_pool_fallback_seconds_total{resource,mode}
	batch        *prometheus.GaugeVec   // quota_client_pool_batch_size{resource}
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_calls_total",
			Help: "Calls sent to quota-center (central calls), by op (apply, heartbeat, finish, status) and result (ok, refused = a 4xx decision, failure, breaker_open = not sent)."},
			[]string{"op", "result"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quota_client_breaker_state",
			Help: "State of the Manager's circuit breaker: 0 closed, 1 half-open, 2 open."}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_fallbacks_total",
			Help: "Applies answered by the resource's fallback because the center could not answer, by mode."},
			[]string{"resource", "mode"}),
		leakGuard: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_leak_guard_total",
			Help: "Leases the local leak guard finished with their whole grant."}, []string{"resource"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quota_client_pending_reports",
			Help: "Usage reports (fail-open use, finishes) waiting for the center."}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_reports_total",
			Help: "Remembered usage reports sent once the center answered (delivered) or refused for good (dropped)."},
			[]string{"result"}),
		takes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_pool_takes_total",
			Help: "LocalPool takes by result: local (served from the batch at once), waited (after a refill), safe_rate (outage safe rate), denied. Local hit ratio = local / all."},
			[]string{"resource", "result"}),
		takeUnits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_pool_take_units_total",
			Help: "Units LocalPool handed out (takes and committed reservations, overage included)."}, []string{"resource"}),
		refills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_pool_refills_total",
			Help: "LocalPool batch applies by result: ok, exhausted (429), unavailable."}, []string{"resource", "result"}),
		fallbackSecs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quota_client_pool_fallback_seconds_total",
			Help: "Seconds LocalPools spent in their declared outage behaviour (deny or safe_rate)."}, []string{"resource", "mode"}),
		batch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "quota_client_pool_batch_size",
			Help: "Size of the LocalPool's next batch request (rate × target period, within min and max)."}, []string{"resource"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.calls, m.breakerState, m.fallbacks, m.leakGuard, m.pending, m.reports,
		m.takes, m.takeUnits, m.refills, m.fallbackSecs, m.batch} {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}
