package httpapi

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/internal/quota"
)

// seriesOf counts reg's series per resource label value ("" = none).
func seriesOf(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			r := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" {
					r = l.GetValue()
				}
			}
			n := 1
			if h := m.GetHistogram(); h != nil {
				n = len(h.GetBucket()) + 3 // buckets, +Inf, sum, count
			}
			out[r] += n
		}
	}
	return out
}

func useResource(m *Metrics, r string) {
	m.Known(quota.Policy{ResourceName: r, QuotaType: quota.TypeTokens})
	m.observeApply(r, quota.ApplyResponse{Decision: quota.Decision{Granted: 5}, QuotaType: quota.TypeTokens})
	m.observeFinish(r, quota.FinishResponse{Charged: 3, Refunded: 2, QuotaType: quota.TypeTokens})
	m.observeHeartbeat(r)
}

// Issue 23 §1: an idle resource's series are deleted (Retain), and the
// per-resource usage histogram is optional; its name stays.
func TestIdleResourcesLoseTheirSeries(t *testing.T) {
	for _, tt := range []struct {
		name      string
		perRes    bool
		wantPerR  int // series of one used resource
		wantNoneR int // series without a resource label (the shared histogram)
	}{
		{"with per-resource histograms", true, 22 + 36, 0},
		{"without them", false, 22, 36},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := NewMetricsWith(reg, MetricsOptions{ResourceHistograms: tt.perRes})
			useResource(m, "busy")
			useResource(m, "idle")
			got := seriesOf(t, reg)
			if got["busy"] != tt.wantPerR || got["idle"] != tt.wantPerR || got[""] != tt.wantNoneR {
				t.Fatalf("series by resource %v; want %d for each used resource and %d unlabelled", got, tt.wantPerR, tt.wantNoneR)
			}
			gone := m.Retain(func(r string) bool { return r == "busy" })
			if len(gone) != 1 || gone[0] != "idle" {
				t.Fatalf("retain deleted %v, want idle", gone)
			}
			got = seriesOf(t, reg)
			if got["busy"] != tt.wantPerR || got["idle"] != 0 {
				t.Fatalf("after retain: %v; want busy's series kept and idle's gone", got)
			}
			// Active again: its series come back from 0.
			m.observeHeartbeat("idle")
			if got = seriesOf(t, reg); got["idle"] != 10 {
				t.Fatalf("idle used again: %d series, want the 10 a request makes", got["idle"])
			}
		})
	}
}

// Known makes zero series for at most MaxKnown resources at a time; a
// request still makes its own resource's series, and Retain frees room.
func TestKnownIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetricsWith(reg, MetricsOptions{})
	for i := range MaxKnown + 5 {
		m.Known(quota.Policy{ResourceName: fmt.Sprintf("r%06d", i), QuotaType: quota.TypeCount})
	}
	if n := len(m.Resources()); n != MaxKnown {
		t.Fatalf("%d resources with series after %d Known calls, want %d", n, MaxKnown+5, MaxKnown)
	}
	m.observeHeartbeat("over")
	m.Retain(func(r string) bool { return r == "r000000" || r == "over" })
	m.Known(quota.Policy{ResourceName: "late", QuotaType: quota.TypeCount})
	if got := seriesOf(t, reg); got["over"] != 10 || got["late"] != 22 || got["r000001"] != 0 {
		t.Fatalf("series: over %d, late %d, r000001 %d; want 10 (its request), 22 (room after Retain), 0", got["over"], got["late"], got["r000001"])
	}
}
