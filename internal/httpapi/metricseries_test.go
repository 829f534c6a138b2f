package httpapi_test

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"testing"

	"github.com/quotacenter/quota-center/internal/httpapi"
)

// A policy's counter series exist at 0 as soon as it is stored, before any
// request: a series born at its first event hides that event from
// increase() (the fail-open alert and panel missed first bursts).
func TestPolicySeriesExistAtZeroBeforeTheFirstEvent(t *testing.T) {
	h := newHarness(t)
	h.putPolicy(t, "zero-series", `{"quotaType":"COUNT","totalLimit":10,"failMode":"OPEN"}`)
	if r := h.get(t, "/admin/policies/zero-series"); r.status != http.StatusOK {
		t.Fatalf("policy not stored: %d %s", r.status, r.raw)
	}
	samples := h.scrape(t)
	r := "zero-series"
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"quota_fail_open_grants_total", map[string]string{"resource": r}},
		{"quota_exhausted_total", map[string]string{"resource": r}},
		{"quota_apply_total", map[string]string{"resource": r, "result": "fail_open"}},
		{"quota_apply_total", map[string]string{"resource": r, "result": "granted"}},
		{"quota_heartbeat_total", map[string]string{"resource": r, "result": "ok"}},
		{"quota_heartbeat_total", map[string]string{"resource": r, "result": "not_found"}},
		{"quota_finish_total", map[string]string{"resource": r, "result": "recovered"}},
		{"quota_finish_total", map[string]string{"resource": r, "result": "rejected"}},
		{"quota_granted_calls_total", map[string]string{"resource": r}},
	} {
		if v, ok := find(samples, c.name, c.labels); !ok || v != 0 {
			t.Errorf("%s%v = %v (present %v), want a 0 series", c.name, c.labels, v, ok)
		}
	}
}

// histogramQuantile is Prometheus' histogram_quantile over cumulative
// buckets (le → count): linear interpolation inside the bucket where the
// rank falls, from the previous bound (0 for the first bucket when its bound
// is positive; the bound itself when it is not).
func histogramQuantile(q float64, buckets map[float64]float64) float64 {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := buckets[les[len(les)-1]]
	rank := q * total
	i := sort.Search(len(les), func(i int) bool { return buckets[les[i]] >= rank })
	if i == len(les)-1 {
		return les[len(les)-2] // +Inf: the highest finite bound
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = les[i-1], buckets[les[i-1]]
	} else if les[0] <= 0 {
		return les[0]
	}
	return lower + (les[i]-lower)*(rank-below)/(buckets[les[i]]-below)
}

// Sessions that all used a whole amount read as that amount at p50 and p99
// (within a thousandth), not half of it: the buckets hold whole amounts.
func TestSessionUsageQuantilesOfWholeAmounts(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		resource string
		used     int
	}{{"used-ones", 1}, {"used-sixteens", 16}, {"used-zeros", 0}} {
		h.putPolicy(t, c.resource, `{"quotaType":"COUNT","totalLimit":100000}`)
		for range 20 {
			a := h.mustOK(t, apply.req(obj(kv("resourceName", str(c.resource)), kv("applyAmount", "20"))))
			h.mustOK(t, finish.req(obj(kv("resourceName", str(c.resource)), kv("sessionId", str(a.body["sessionId"].(string))),
				kv("actualUsedAmount", strconv.Itoa(c.used)))))
		}
		buckets := map[float64]float64{}
		for _, s := range h.scrape(t) {
			if s.name == "quota_session_used_calls_bucket" && s.labels["resource"] == c.resource {
				le, err := strconv.ParseFloat(s.labels["le"], 64)
				if err != nil {
					t.Fatal(err)
				}
				buckets[le] = s.value
			}
		}
		if len(buckets) < 3 {
			t.Fatalf("%s: buckets %v", c.resource, buckets)
		}
		for _, q := range []float64{0.5, 0.99} {
			if got := histogramQuantile(q, buckets); math.Abs(got-float64(c.used)) > 0.001 {
				t.Errorf("%s: p%v = %v, want %d (within 0.001)", c.resource, q*100, got, c.used)
			}
		}
	}
}

// Whole counts (group-commit rows, pipeline calls) read exactly too: every
// power of the factor has its own bucket, and a count between two powers
// reads between them.
func TestWholeBucketsReadWholeCounts(t *testing.T) {
	bounds := httpapi.WholeBuckets(2, 1024)
	if bounds[0] != 0 || bounds[len(bounds)-1] != 1024 || len(bounds) != 1+2*11 {
		t.Fatalf("bounds %v", bounds)
	}
	for _, c := range []struct {
		value  float64
		lo, hi float64 // where p50 and p99 may read
	}{{1, 0.999, 1}, {8, 7.999, 8}, {1024, 1023.999, 1024}, {0, 0, 0}, {3, 2, 3.999}} {
		buckets := map[float64]float64{math.Inf(1): 10}
		for _, le := range bounds {
			if c.value <= le {
				buckets[le] = 10
			} else {
				buckets[le] = 0
			}
		}
		for _, q := range []float64{0.5, 0.99} {
			if got := histogramQuantile(q, buckets); got < c.lo || got > c.hi {
				t.Errorf("all %v: p%v = %v, want %v to %v", c.value, q*100, got, c.lo, c.hi)
			}
		}
	}
}
