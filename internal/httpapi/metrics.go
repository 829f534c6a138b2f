package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/scrape"
)

// Metrics are the request-side Prometheus metrics. Resource labels are only
// ever set for resources that have a policy, so unknown names never create
// series; there is no client or session label.
type Metrics struct {
	apply     *prometheus.CounterVec // resource, result
	failOpen  *prometheus.CounterVec // resource
	exhausted *prometheus.CounterVec // resource
	finish    *prometheus.CounterVec // resource, result
	heartbeat *prometheus.CounterVec // resource, result
	granted   map[string]*prometheus.CounterVec
	charged   map[string]*prometheus.CounterVec
	refunded  map[string]*prometheus.CounterVec
	overage   map[string]*prometheus.CounterVec
	used      map[string]*prometheus.HistogramVec
	duration  *prometheus.HistogramVec // route, method, code
	cache     *seriesCache             // the series above already looked up
	refusals  *prometheus.CounterVec   // resource, reason, tier (poolmetrics.go)
	// perResourceUsed: quota_session_used_<unit> has a resource label
	// (MetricsOptions.ResourceHistograms).
	perResourceUsed bool
}

// MetricsOptions shape the request metrics.
type MetricsOptions struct {
	// ResourceHistograms: quota_session_used_<unit> per resource (a
	// resource label, 36 series a resource and unit). Off, it has no
	// resource label: one histogram a unit for the instance
	// (QC_METRICS_RESOURCE_HISTOGRAMS, off by default in quota-center
	// serve: issue 23 §1, per-resource histograms were half of a used
	// resource's ~68 series).
	ResourceHistograms bool
}

// NewMetrics registers the request metrics on reg, with per-resource
// histograms (NewMetricsWith for the options).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return NewMetricsWith(reg, MetricsOptions{ResourceHistograms: true})
}

// NewMetricsWith registers the request metrics on reg as o says.
func NewMetricsWith(reg prometheus.Registerer, o MetricsOptions) *Metrics {
	usedLabels := []string{"resource"}
	if !o.ResourceHistograms {
		usedLabels = nil
	}
	f := promauto.With(reg)
	m := &Metrics{
		perResourceUsed: o.ResourceHistograms,
		apply: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_apply_total", Help: "Apply requests by resource and result (granted, replayed, exhausted, fail_open, rejected: refused with another 4xx, error: a 5xx).",
		}, []string{"resource", "result"}),
		failOpen: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_fail_open_grants_total",
			Help: "Applies granted by a failMode OPEN policy while Redis or MySQL could not decide (not counted live; reconciled later).",
		}, []string{"resource"}),
		exhausted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_exhausted_total", Help: "Applies refused because the period's quota was exhausted.",
		}, []string{"resource"}),
		finish: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_finish_total", Help: "Finish requests by resource and result (finished, replayed, recovered, rejected: refused with a 4xx, error: a 5xx).",
		}, []string{"resource", "result"}),
		heartbeat: f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_heartbeat_total", Help: "Heartbeats by resource and result (ok, not_active, not_found, rejected: refused with another 4xx, error: a 5xx).",
		}, []string{"resource", "result"}),
		granted:  map[string]*prometheus.CounterVec{},
		charged:  map[string]*prometheus.CounterVec{},
		refunded: map[string]*prometheus.CounterVec{},
		overage:  map[string]*prometheus.CounterVec{},
		used:     map[string]*prometheus.HistogramVec{},
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quota_http_request_duration_seconds",
			Help:    "HTTP request latency by chi route pattern, method and status code.",
			Buckets: []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1, 2.5},
		}, []string{"route", "method", "code"}),
		cache:    newSeriesCache(),
		refusals: newRefusals(f),
	}
	for _, u := range quota.Units() {
		m.granted[u] = f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_granted_" + u + "_total", Help: "Amount granted by applies, in " + u + ".",
		}, []string{"resource"})
		m.charged[u] = f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_charged_" + u + "_total", Help: "Actual usage reported by finishes (overage included), in " + u + ".",
		}, []string{"resource"})
		m.refunded[u] = f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_refunded_" + u + "_total", Help: "Amount refunded by finishes (granted minus actual), in " + u + ".",
		}, []string{"resource"})
		m.overage[u] = f.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_overage_" + u + "_total", Help: "Usage beyond the grant, charged by finishes, in " + u + ".",
		}, []string{"resource"})
		m.used[u] = f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "quota_session_used_" + u, Help: "Actual usage per finished session, in " + u + ".",
			Buckets: usedBuckets(),
		}, usedLabels)
	}
	return m
}

// The result label values of quota_apply_total, quota_finish_total and
// quota_heartbeat_total.
var (
	applyResults     = []string{"granted", "replayed", "exhausted", "fail_open", "rejected", "error"}
	finishResults    = []string{"finished", "replayed", "recovered", "rejected", "error"}
	heartbeatResults = []string{"ok", "not_active", "not_found", "rejected", "error"}
)

// MaxKnown bounds the resources whose series Known made (see Known).
const MaxKnown = 10_000

// usedBuckets are the bounds of quota_session_used_<unit>: WholeBuckets by
// powers of four up to 4^15.
func usedBuckets() []float64 { return WholeBuckets(4, 1<<30) }

// WholeBuckets are histogram bounds for whole numbers (amounts, rows,
// calls): 0, then for each power b of factor from 1 to max, b - 0.001 and
// b. The bucket (b-0.001, b] holds exactly the value b, so
// histogram_quantile (which interpolates from a bucket's lower bound) reads
// it within a thousandth: observations that are all 1 give p50 and p99 of
// 1.00, where a first bucket le="1" gave 0.5 and 0.99. factor must be > 1.
func WholeBuckets(factor, max float64) []float64 {
	out := []float64{0}
	for b := 1.0; b <= max; b *= factor {
		out = append(out, b-0.001, b)
	}
	return out
}

// failResult is the result label of a request answered with err: "error"
// when the server failed (5xx), "rejected" when the request was refused
// (4xx: a bad field, a conflict, a session not found …).
func failResult(err error) string {
	if status, _ := classify(err); status >= 500 {
		return "error"
	}
	return "rejected"
}

// Known creates a resource's series at 0 when its policy appears or it
// becomes active (on a PUT, and on every sweep pass for the active
// resources, those other instances created or used included), so that
// dashboards show zeros, not gaps, and increase() sees the first event of
// a counter instead of a series born at 1. Retain drops them again once
// the resource is idle.
//
// At most MaxKnown resources have series made by Known at a time: beyond
// it Known makes none (a request still makes its resource's series), so a
// burst of 100,000 PUTs does not hold 2.2 M zero series until the next
// Retain (it grew quota-center to 1 GB RSS and a 20 MB /metrics).
func (m *Metrics) Known(p quota.Policy) {
	r, u := p.ResourceName, p.QuotaType.Unit()
	m.cache.mu.Lock()
	if _, ok := m.cache.known[r]; !ok && len(m.cache.known) >= MaxKnown {
		m.cache.mu.Unlock()
		return
	}
	m.cache.known[r] = struct{}{}
	m.cache.mu.Unlock()
	for _, res := range applyResults {
		m.apply.WithLabelValues(r, res)
	}
	m.exhausted.WithLabelValues(r)
	m.failOpen.WithLabelValues(r)
	for _, res := range finishResults {
		m.finish.WithLabelValues(r, res)
	}
	for _, res := range heartbeatResults {
		m.heartbeat.WithLabelValues(r, res)
	}
	if u == "" {
		return
	}
	m.granted[u].WithLabelValues(r)
	m.charged[u].WithLabelValues(r)
	m.refunded[u].WithLabelValues(r)
	m.overage[u].WithLabelValues(r)
}

func (m *Metrics) observeApply(resource string, res quota.ApplyResponse) {
	s := m.resource(resource)
	switch {
	case res.Refused():
		s.applyExhausted.Inc()
		s.exhausted.Inc()
	case res.Replayed:
		s.applyReplayed.Inc()
	case res.FailOpen:
		s.applyFailOpen.Inc()
		s.failOpen.Inc()
	default:
		s.applyGranted.Inc()
		if u := res.QuotaType.Unit(); u != "" {
			m.unit(resource, u).granted.Add(float64(res.Granted))
		}
	}
}

func (m *Metrics) observeFinish(resource string, res quota.FinishResponse) {
	s := m.resource(resource)
	if res.Replayed {
		s.finishReplayed.Inc()
		return
	}
	if res.WasLeaked {
		s.finishRecovered.Inc()
	} else {
		s.finishFinished.Inc()
	}
	if u := res.QuotaType.Unit(); u != "" {
		us := m.unit(resource, u)
		us.charged.Add(float64(res.Charged))
		us.refunded.Add(float64(res.Refunded))
		us.overage.Add(float64(res.Overage))
		us.used.Observe(float64(res.Charged))
	}
}

// observeHeartbeat counts a heartbeat answered 200.
func (m *Metrics) observeHeartbeat(resource string) { m.resource(resource).heartbeatOK.Inc() }

// StatusSource is what the balance collector reads at scrape time.
type StatusSource interface {
	Policies(ctx context.Context) ([]quota.Policy, error)
	Status(ctx context.Context, resource string) (quota.StatusResponse, error)
}

// Prefetcher is a source whose per-resource reads a scrape-time collector
// lets batch first: Prefetch is given every resource the scrape is about to
// read (before any Status), reads those it must in a few round trips and
// keeps the answers for the reads that follow (issue 23 §1: 1,000 used
// resources read one call each took ~31 rounds of round trips). It
// returns when they are read or ctx ends; its errors are answered by the
// reads that follow.
type Prefetcher interface {
	Prefetch(ctx context.Context, names []string)
}

// prefetch hands pols' names to src when it is a Prefetcher.
func prefetch(ctx context.Context, src any, pols []quota.Policy) {
	p, ok := src.(Prefetcher)
	if !ok {
		return
	}
	names := make([]string, len(pols))
	for i, pol := range pols {
		names[i] = pol.ResourceName
	}
	p.Prefetch(ctx, names)
}

// ScrapeWorkers bounds the resources a scrape-time collector (balance,
// pools, forecast) reads at once (scrape.Workers).
const ScrapeWorkers = scrape.Workers

// BalanceCollector exports each resource's current balance, read from the
// stores at scrape time (never a value captured once, so no gauge is older
// than the scrape that shows it): quota_limit_<unit>, quota_used_<unit>,
// quota_reserved_<unit>, quota_remaining_<unit>, quota_active_sessions,
// quota_period_start_timestamp_seconds and
// quota_next_reset_timestamp_seconds. A src that is a Prefetcher is first given
// every resource to read in one batch; then the resources are read concurrently,
// ScrapeWorkers at a time, all within the per-scrape timeout; a read that
// fails (or runs past the timeout) counts one quota_store_scrape_errors_total
// and leaves that resource's series out of the scrape.
type BalanceCollector struct {
	src     StatusSource
	timeout time.Duration
	descs   map[string][4]*prometheus.Desc // unit → limit, used, reserved, remaining
	active  *prometheus.Desc
	start   *prometheus.Desc
	next    *prometheus.Desc
	errs    prometheus.Counter
}

// NewBalanceCollector registers a collector reading src with the given
// per-scrape timeout.
func NewBalanceCollector(reg prometheus.Registerer, src StatusSource, timeout time.Duration) *BalanceCollector {
	c := &BalanceCollector{
		src: src, timeout: timeout, descs: map[string][4]*prometheus.Desc{},
		active: prometheus.NewDesc("quota_active_sessions", "USING sessions of the resource.", []string{"resource"}, nil),
		start:  prometheus.NewDesc("quota_period_start_timestamp_seconds", "Start of the current period, Unix seconds.", []string{"resource"}, nil),
		next:   prometheus.NewDesc("quota_next_reset_timestamp_seconds", "End of the current period (next reset), Unix seconds; absent when the policy never resets.", []string{"resource"}, nil),
		errs: promauto.With(reg).NewCounter(prometheus.CounterOpts{
			Name: "quota_store_scrape_errors_total", Help: "Balance reads that failed during a metrics scrape.",
		}),
	}
	for _, u := range quota.Units() {
		c.descs[u] = [4]*prometheus.Desc{
			prometheus.NewDesc("quota_limit_"+u, "Limit of the current period, in "+u+".", []string{"resource"}, nil),
			prometheus.NewDesc("quota_used_"+u, "Charged in the current period (finished and leaked sessions), in "+u+".", []string{"resource"}, nil),
			prometheus.NewDesc("quota_reserved_"+u, "Reserved by USING sessions of the current period, in "+u+".", []string{"resource"}, nil),
			prometheus.NewDesc("quota_remaining_"+u, "Limit minus used minus reserved (negative after overage), in "+u+".", []string{"resource"}, nil),
		}
	}
	reg.MustRegister(c)
	return c
}

// Describe implements prometheus.Collector.
func (c *BalanceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		for _, x := range d {
			ch <- x
		}
	}
	ch <- c.active
	ch <- c.start
	ch <- c.next
}

// Collect implements prometheus.Collector.
func (c *BalanceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	pols, err := c.src.Policies(ctx)
	if err != nil {
		c.errs.Inc()
		return
	}
	prefetch(ctx, c.src, pols)
	scrape.Each(pols, func(p quota.Policy) {
		if st, err := c.src.Status(ctx, p.ResourceName); err != nil {
			c.errs.Inc()
		} else {
			c.collect(ch, p, st)
		}
	})
}

// collect sends the series of p's balance st.
func (c *BalanceCollector) collect(ch chan<- prometheus.Metric, p quota.Policy, st quota.StatusResponse) {
	r := p.ResourceName
	if d, ok := c.descs[p.QuotaType.Unit()]; ok {
		ch <- prometheus.MustNewConstMetric(d[0], prometheus.GaugeValue, float64(st.Policy.TotalLimit), r)
		ch <- prometheus.MustNewConstMetric(d[1], prometheus.GaugeValue, float64(st.Used), r)
		ch <- prometheus.MustNewConstMetric(d[2], prometheus.GaugeValue, float64(st.Reserved), r)
		ch <- prometheus.MustNewConstMetric(d[3], prometheus.GaugeValue, float64(st.Remaining), r)
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.ActiveSessions), r)
	ch <- prometheus.MustNewConstMetric(c.start, prometheus.GaugeValue, float64(st.Period.Start.UnixMilli())/1000, r)
	if !st.Period.End.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.next, prometheus.GaugeValue, float64(st.Period.End.UnixMilli())/1000, r)
	}
}
