package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/internal/httpapi"
)

// groupMetrics are the sizes of the ledger's group commits and of the Redis
// auto-pipelines (what --mysql-group-commit-* and --redis-pipeline-max-calls
// are tuned by), and how many applies go in batches (--redis-batch-applies).
type groupMetrics struct {
	commitRows     *prometheus.HistogramVec
	pipelineCalls  prometheus.Histogram
	batchedApplies *prometheus.CounterVec
}

// groupSizeBuckets are counts of rows or calls, 1 to 1024, each power of
// two read exactly (httpapi.WholeBuckets: a group of 1 reads as 1, not 0.5).
var groupSizeBuckets = httpapi.WholeBuckets(2, 1024)

func newGroupMetrics(reg prometheus.Registerer) *groupMetrics {
	m := &groupMetrics{
		commitRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quota_ledger_group_commit_rows",
			Help:    "Rows per group-commit statement of the ledger, by op (insert: new sessions, finish: settlements).",
			Buckets: groupSizeBuckets,
		}, []string{"op"}),
		pipelineCalls: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quota_redis_pipeline_calls",
			Help:    "Script calls (apply, heartbeat, finish) per Redis auto-pipeline.",
			Buckets: groupSizeBuckets,
		}),
	}
	m.batchedApplies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quota_redis_batched_applies_total",
		Help: "Applies sent to Redis in an apply_batch.lua call (QC_REDIS_BATCH_APPLIES), by result: decided (by the batch) or undecided (left to apply.lua alone: a replay, a conflict, a period not seeded).",
	}, []string{"result"})
	reg.MustRegister(m.commitRows, m.pipelineCalls, m.batchedApplies)
	return m
}

func (m *groupMetrics) groupCommit(op string, rows int) {
	m.commitRows.WithLabelValues(op).Observe(float64(rows))
}

func (m *groupMetrics) pipeline(calls int) { m.pipelineCalls.Observe(float64(calls)) }

// batch counts one apply_batch.lua call's applies (quota_redis_batched_applies_total).
func (m *groupMetrics) batch(applies, undecided int) {
	m.batchedApplies.WithLabelValues("decided").Add(float64(applies - undecided))
	m.batchedApplies.WithLabelValues("undecided").Add(float64(undecided))
}
