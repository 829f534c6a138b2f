package httpapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// manyPolicies are n token policies, r000 … r(n-1).
func manyPolicies(n int) []quota.Policy {
	out := make([]quota.Policy, n)
	for i := range out {
		out[i] = quota.Policy{ResourceName: fmt.Sprintf("r%03d", i), QuotaType: quota.TypeTokens, TotalLimit: 100}
	}
	return out
}

// heldStatus is a StatusSource, PolicyLister and PoolStatusReader whose
// reads pass through an InFlight (each waits until ScrapeWorkers are in flight at once).
type heldStatus struct {
	pols []quota.Policy
	b    *testenv.InFlight
}

func (h heldStatus) Policies(context.Context) ([]quota.Policy, error) { return h.pols, nil }

func (h heldStatus) Status(ctx context.Context, resource string) (quota.StatusResponse, error) {
	if err := h.b.Enter(ctx); err != nil {
		return quota.StatusResponse{}, err
	}
	return quota.StatusResponse{Policy: quota.Policy{ResourceName: resource, QuotaType: quota.TypeTokens, TotalLimit: 100}, Used: 7, Remaining: 93}, nil
}

type heldPools struct{ heldStatus }

func (h heldPools) Status(ctx context.Context, _ string) (admin.PoolStatus, bool, error) {
	if err := h.b.Enter(ctx); err != nil {
		return admin.PoolStatus{}, false, err
	}
	return admin.PoolStatus{Model: &pools.Model{}}, true, nil
}

// A scrape reads the used resources' balances and pools concurrently,
// ScrapeWorkers at a time (issue 23 §1: 1,000 resources read one after
// another took 1.03 s). Each read waits until ScrapeWorkers reads are in
// flight at once, so the scrape passes only when they are concurrent, and
// never more than ScrapeWorkers are.
func TestScrapeReadsResourcesConcurrentlyBounded(t *testing.T) {
	const n = 3 * httpapi.ScrapeWorkers
	t.Run("balances", func(t *testing.T) {
		src := heldStatus{pols: manyPolicies(n), b: testenv.NewInFlight(httpapi.ScrapeWorkers)}
		reg := prometheus.NewRegistry()
		httpapi.NewBalanceCollector(reg, src, 2*time.Second)
		testenv.CheckScrape(t, reg, src.b, "quota_remaining_tokens", n, "quota_store_scrape_errors_total")
	})
	t.Run("pools", func(t *testing.T) {
		src := heldPools{heldStatus{pols: manyPolicies(n), b: testenv.NewInFlight(httpapi.ScrapeWorkers)}}
		reg := prometheus.NewRegistry()
		httpapi.NewPoolCollector(reg, src, src, 2*time.Second)
		testenv.CheckScrape(t, reg, src.b, "quota_pool_size_tokens", 4*n, "quota_pool_scrape_errors_total") // 4 pools a resource
	})
}
