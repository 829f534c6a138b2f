package admin

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/scrape"
)

// ForecastCollector exports each active resource's forecast (every
// resource's without Deps.Active), computed at scrape time from the same
// data as GET /quota/status:
//
//   - quota_exhaustion_eta_seconds{resource}: seconds until the remaining
//     budget reaches 0 at the current burn rate; 0 when nothing remains;
//     +Inf when the budget lasts past the next reset, nothing is being
//     consumed, or the burn rate is not known yet (less than 10 s of
//     samples in the period).
//   - quota_burn_rate_<unit>_per_second{resource}: consumption (charged +
//     reserved) per second over the last 5 minutes of the current period;
//     absent while unknown.
//
// The status and burn samples are read at scrape time (no value is older
// than its scrape): first those Prefetch batches, when set, then
// ScrapeWorkers resources at a time (issue 23 §1), within the per-scrape timeout;
// a failed read counts one quota_forecast_scrape_errors_total.
type ForecastCollector struct {
	svc     *Service
	status  StatusReader // nil: svc's quota service
	timeout time.Duration
	eta     *prometheus.Desc
	burn    map[string]*prometheus.Desc
	errs    prometheus.Counter

	// Samples, when set (before the first scrape), reads the burn samples
	// of a resource instead of the service's Live store: quota-center
	// serve gives it a read kept while the resource does not change (issue
	// 23 §1). Same shape and errors as Live.BurnSamples.
	Samples func(ctx context.Context, resource string, since time.Time) ([]quota.BurnSample, error)

	// Prefetch, when set (before the first scrape), is given every
	// resource a scrape is about to read, before any read: quota-center
	// serve reads the statuses and burn samples of those that changed in
	// one batch there, which the reads then take (issue 23 §1).
	Prefetch func(ctx context.Context, names []string)
}

// StatusReader reads a resource's status (quota.Service.Status's shape).
type StatusReader func(ctx context.Context, resource string) (quota.StatusResponse, error)

// NewForecastCollector registers a collector of svc's forecasts on reg,
// each scrape bounded by timeout.
func NewForecastCollector(reg prometheus.Registerer, svc *Service, timeout time.Duration) *ForecastCollector {
	return NewForecastCollectorWith(reg, svc, timeout, nil)
}

// NewForecastCollectorWith is NewForecastCollector reading the statuses
// with status (nil: svc's quota service): the app gives it the one the
// balance gauges read in the same scrape, so that a scrape reads each
// resource's balance once (issue 23 §1).
func NewForecastCollectorWith(reg prometheus.Registerer, svc *Service, timeout time.Duration, status StatusReader) *ForecastCollector {
	c := &ForecastCollector{
		svc: svc, status: status, timeout: timeout, burn: map[string]*prometheus.Desc{},
		eta: prometheus.NewDesc("quota_exhaustion_eta_seconds",
			"Seconds until the resource's remaining budget reaches 0 at the burn rate of the last 5 minutes; 0 when exhausted, +Inf when it lasts past the next reset or nothing is consumed.",
			[]string{"resource"}, nil),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_forecast_scrape_errors_total", Help: "Forecast reads (status or burn samples) that failed during a metrics scrape.",
		}),
	}
	for _, u := range quota.Units() {
		c.burn[u] = prometheus.NewDesc("quota_burn_rate_"+u+"_per_second",
			"Consumption (charged + reserved) per second over the last 5 minutes of the current period, in "+u+".",
			[]string{"resource"}, nil)
	}
	reg.MustRegister(c, c.errs)
	return c
}

// Describe implements prometheus.Collector.
func (c *ForecastCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.eta
	for _, d := range c.burn {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ForecastCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	pols, err := c.svc.sampled(ctx)
	if err != nil {
		c.errs.Inc()
		return
	}
	if c.Prefetch != nil {
		names := make([]string, len(pols))
		for i, p := range pols {
			names[i] = p.ResourceName
		}
		c.Prefetch(ctx, names)
	}
	scrape.Each(pols, func(p quota.Policy) {
		if st, f, err := c.read(ctx, p.ResourceName); err != nil {
			c.errs.Inc()
		} else {
			c.collect(ch, p.ResourceName, st, f)
		}
	})
}

// read is resource's status and forecast.
func (c *ForecastCollector) read(ctx context.Context, resource string) (quota.StatusResponse, Forecast, error) {
	if c.status == nil {
		return c.svc.Status(ctx, resource)
	}
	st, err := c.status(ctx, resource)
	if err != nil {
		return st, Forecast{}, err
	}
	if c.Samples != nil {
		now := c.svc.now()
		samples, err := c.Samples(ctx, resource, now.Add(-BurnWindow))
		if err != nil {
			return st, Forecast{}, err
		}
		return st, computeForecast(now, st, samples), nil
	}
	f, err := c.svc.Forecast(ctx, st)
	return st, f, err
}

// ScrapeWorkers bounds the resources a forecast scrape reads at once
// (scrape.Workers).
const ScrapeWorkers = scrape.Workers

// collect sends the forecast series of resource r.
func (c *ForecastCollector) collect(ch chan<- prometheus.Metric, r string, st quota.StatusResponse, f Forecast) {
	eta := math.Inf(1)
	if d, ok := f.ETA(c.svc.now()); ok {
		eta = d.Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.eta, prometheus.GaugeValue, eta, r)
	if d, ok := c.burn[st.Policy.QuotaType.Unit()]; ok && f.BurnRate != nil {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, *f.BurnRate, r)
	}
}
