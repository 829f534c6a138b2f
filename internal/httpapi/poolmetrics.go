package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/scrape"
)

// The pools' metrics (issue 21 §3). Their label values come only from
// policies (resource), business lines (line: operator-made, a handful a
// resource) and enums (pool, reason, tier), never from a request's free
// text: an apply naming an unknown line is refused before it is counted.

// LineTiers says which business lines a resource has and their tiers
// (quota.Service.PoolsOf, from its policy+pools cache: the apply that was
// just refused read it).
type LineTiers interface {
	PoolsOf(ctx context.Context, resource string) (quota.PoolUse, error)
}

// newRefusals registers quota_pool_refusals_total.
func newRefusals(f promauto.Factory) *prometheus.CounterVec {
	return f.NewCounterVec(prometheus.CounterOpts{
		Name: "quota_pool_refusals_total",
		Help: "Refused applies by resource, reason (EXHAUSTED, LINE_EXHAUSTED, WATERMARK, POOL_EXHAUSTED) and the line's tier " +
			"(CORE, GROWTH, EXPLORE; none for a resource without business lines).",
	}, []string{"resource", "reason", "tier"})
}

// countRefusal counts a refused apply by reason and the tier of its line,
// and returns the tier: "none" without a line, "unknown" when it cannot be
// read (from lines, cached) — the refusal is counted rather than lost.
func (s *Server) countRefusal(ctx context.Context, req quota.ApplyRequest, res quota.ApplyResponse) string {
	if res.Refusal == nil {
		return "none"
	}
	tier := "none"
	if req.BusinessLine != "" {
		tier = "unknown"
		if s.lines != nil {
			if use, err := s.lines.PoolsOf(ctx, req.ResourceName); err == nil && use.Lines[req.BusinessLine] != "" {
				tier = string(use.Lines[req.BusinessLine])
			}
		}
	}
	if s.metrics != nil {
		s.metrics.refusals.WithLabelValues(req.ResourceName, string(res.Refusal.Reason), tier).Inc()
	}
	return tier
}

// PoolStatusReader reads a resource's pools now; ok is false for a
// resource without business lines or grants (admin.Pools.Status).
type PoolStatusReader interface {
	Status(ctx context.Context, resource string) (admin.PoolStatus, bool, error)
}

// PolicyLister lists the resources whose series to export (the balance
// collector's source: every policy, or the active ones).
type PolicyLister interface {
	Policies(ctx context.Context) ([]quota.Policy, error)
}

// PoolCollector exports each pooled resource's pools, read at scrape time:
//
//   - quota_pool_size_<unit>{resource,pool} and quota_pool_used_<unit>:
//     pool shared (its layout's size plus buffer released to it; used: what
//     lines borrowed), dedicated (the lines' dedicated parts now; used: what
//     they hold of them), buffer (the reserve; used: what lines hold of
//     buffer lent to them) and grant (active temporary grants; used: what
//     sessions hold of them);
//   - per line, quota_line_dedicated_<unit>, quota_line_used_<unit> (grants
//     included), quota_line_borrowed_<unit>, quota_line_may_use_<unit>
//     {resource,line}, and quota_line_watermark_percent{resource,line,tier}
//     (the reject watermark now, a percentage of may_use).
//
// Resources without lines or grants have none of these series. Like the
// BalanceCollector's, the reads are made at scrape time (no value is older
// than its scrape), ScrapeWorkers at a time, within the per-scrape timeout;
// a failed read counts one quota_pool_scrape_errors_total.
type PoolCollector struct {
	policies PolicyLister
	pools    PoolStatusReader
	timeout  time.Duration
	size     map[string]*prometheus.Desc
	used     map[string]*prometheus.Desc
	line     map[string][4]*prometheus.Desc // unit → dedicated, used, borrowed, may_use
	mark     *prometheus.Desc
	errs     prometheus.Counter
}

// NewPoolCollector registers a collector of the pools of the resources
// policies lists, read with pools, with the given per-scrape timeout.
func NewPoolCollector(reg prometheus.Registerer, policies PolicyLister, pools PoolStatusReader, timeout time.Duration) *PoolCollector {
	c := &PoolCollector{policies: policies, pools: pools, timeout: timeout,
		size: map[string]*prometheus.Desc{}, used: map[string]*prometheus.Desc{}, line: map[string][4]*prometheus.Desc{},
		mark: prometheus.NewDesc("quota_line_watermark_percent", "A business line's reject watermark now, percent of what it may use.",
			[]string{"resource", "line", "tier"}, nil),
		errs: promauto.With(reg).NewCounter(prometheus.CounterOpts{
			Name: "quota_pool_scrape_errors_total", Help: "Pool reads that failed during a metrics scrape.",
		}),
	}
	pl, ll := []string{"resource", "pool"}, []string{"resource", "line"}
	for _, u := range quota.Units() {
		c.size[u] = prometheus.NewDesc("quota_pool_size_"+u, "Size of a pool (shared, dedicated, buffer, grant) now, in "+u+".", pl, nil)
		c.used[u] = prometheus.NewDesc("quota_pool_used_"+u, "Held of a pool in the current period, in "+u+".", pl, nil)
		c.line[u] = [4]*prometheus.Desc{
			prometheus.NewDesc("quota_line_dedicated_"+u, "A business line's dedicated part now (layout − lent + reclaimed), in "+u+".", ll, nil),
			prometheus.NewDesc("quota_line_used_"+u, "Held by a business line in the current period, grants included, in "+u+".", ll, nil),
			prometheus.NewDesc("quota_line_borrowed_"+u, "Held by a business line from the shared pool, in "+u+".", ll, nil),
			prometheus.NewDesc("quota_line_may_use_"+u, "What a business line could hold now, grants aside (the pools status's mayUse: dedicated now, buffer lent, "+
				"borrowed and what it may still borrow; its watermark is a percentage of it), in "+u+".", ll, nil),
		}
	}
	reg.MustRegister(c)
	return c
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, u := range quota.Units() {
		ch <- c.size[u]
		ch <- c.used[u]
		for _, d := range c.line[u] {
			ch <- d
		}
	}
	ch <- c.mark
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	pols, err := c.policies.Policies(ctx)
	if err != nil {
		c.errs.Inc()
		return
	}
	prefetch(ctx, c.pools, pols)
	scrape.Each(pols, func(p quota.Policy) {
		u := p.QuotaType.Unit()
		if _, known := c.size[u]; !known {
			return
		}
		st, ok, err := c.pools.Status(ctx, p.ResourceName)
		switch {
		case err != nil:
			c.errs.Inc()
		case ok:
			c.collect(ch, p.ResourceName, u, st)
		}
	})
}

func (c *PoolCollector) collect(ch chan<- prometheus.Metric, r, u string, st admin.PoolStatus) {
	g := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	m := st.Model
	var ded, dedUsed, bufUsed, grant, grantUsed int64
	for _, ll := range st.Layout.Lines {
		l := m.Lines[ll.Name]
		if l == nil {
			continue
		}
		ded += l.OwnDedicated()
		dedUsed += l.UsedDedicated
		bufUsed += l.UsedBuffer
		d := c.line[u]
		g(d[0], l.OwnDedicated(), r, l.Name)
		g(d[1], l.Used()+l.UsedGrant, r, l.Name)
		g(d[2], l.UsedShared, r, l.Name)
		g(d[3], m.Reach(l), r, l.Name)
		ch <- prometheus.MustNewConstMetric(c.mark, prometheus.GaugeValue, float64(l.Watermark)/100, r, l.Name, string(l.Tier))
	}
	now := time.Now().UnixMilli()
	for _, gr := range st.Grants {
		if gr.Active(now) && gr.Kind == pools.KindGrant {
			grant += gr.Amount
			grantUsed += gr.Used
		}
	}
	for _, p := range []struct {
		name       string
		size, used int64
	}{
		{"shared", st.Layout.Shared + m.SharedBuffer, m.SharedUsed},
		{"dedicated", ded, dedUsed},
		{"buffer", st.Layout.Buffer, bufUsed},
		{"grant", grant, grantUsed},
	} {
		g(c.size[u], p.size, r, p.name)
		g(c.used[u], p.used, r, p.name)
	}
}
