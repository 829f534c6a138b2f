package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// heldQuota's Status passes through an InFlight.
type heldQuota struct {
	admin.Quota // nil: only Status is used
	f           *testenv.InFlight
}

func (h heldQuota) Status(ctx context.Context, resource string) (quota.StatusResponse, error) {
	if err := h.f.Enter(ctx); err != nil {
		return quota.StatusResponse{}, err
	}
	return quota.StatusResponse{Policy: quota.Policy{ResourceName: resource, QuotaType: quota.TypeTokens, TotalLimit: 100}, Remaining: 100}, nil
}

// noSamples is a Live store without burn samples.
type noSamples struct{ admin.Live }

func (noSamples) BurnSamples(context.Context, string, time.Time) ([]quota.BurnSample, error) {
	return nil, nil
}

// A forecast scrape reads the used resources concurrently, ScrapeWorkers at
// a time (issue 23 §1): each status read waits until ScrapeWorkers are in
// flight at once, so the scrape passes only when they are concurrent.
func TestForecastScrapeReadsConcurrentlyBounded(t *testing.T) {
	const n = 3 * admin.ScrapeWorkers
	pols := make([]quota.Policy, n)
	for i := range pols {
		pols[i] = quota.Policy{ResourceName: fmt.Sprintf("r%03d", i), QuotaType: quota.TypeTokens, TotalLimit: 100}
	}
	q := heldQuota{f: testenv.NewInFlight(admin.ScrapeWorkers)}
	svc := admin.New(admin.Deps{Quota: q, Live: noSamples{},
		Active: func(context.Context) ([]quota.Policy, error) { return pols, nil }})
	reg := prometheus.NewRegistry()
	admin.NewForecastCollector(reg, svc, 2*time.Second)
	testenv.CheckScrape(t, reg, q.f, "quota_exhaustion_eta_seconds", n, "quota_forecast_scrape_errors_total")
}
