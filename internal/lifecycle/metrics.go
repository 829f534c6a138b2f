package lifecycle

import "github.com/prometheus/client_golang/prometheus"

// metrics are the job's Prometheus metrics.
type metrics struct {
	rolled, deleted, errors prometheus.Counter
	lastRun, blocked        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		rolled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_ledger_rows_rolled_up_total", Help: "Ledger rows summed into quota_usage_rollup by the lifecycle job."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_ledger_rows_deleted_total", Help: "Rolled-up ledger rows deleted past QC_LEDGER_RETENTION."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_ledger_lifecycle_errors_total", Help: "Lifecycle passes or resources that failed (retried on the next pass)."}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quota_ledger_lifecycle_last_run_timestamp_seconds", Help: "When the last lifecycle pass over every resource ended (Unix seconds)."}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quota_ledger_rollup_blocked_resources", Help: "Resources whose rollup stopped at the last pass before its target, at an open (USING) session's row."}),
	}
	if reg != nil {
		reg.MustRegister(m.rolled, m.deleted, m.errors, m.lastRun, m.blocked)
	}
	return m
}
