package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/admin"
)

// Issue 23 §1: a quiet used resource's full visits. Over 70 s (more than
// the one-minute visits of the burn-rate sampler; reconciliation's every 10
// minutes, its first pass after the 70 s), with a scrape every 10 s, the resource costs one status read
// (balance.lua): the sampler's, which the scrape's balance and forecast
// gauges take; and no sweep (expired.lua): the sweeper's full visit is
// DefaultFullVisit (5 minutes), the change log's losses being detected
// (epoch, failovers, dead instances). Before, each minute the sweeper ran
// expired.lua, and the sampler and the scrape each read the status.
func TestQuietResourceFullVisitIsOneStatusRead(t *testing.T) {
	s, r, addr := quietResourceWith(t, "--reconcile-interval", "10m")
	scrape(t, s)
	mon := monitorRedis(t, addr, "{"+r+"}")
	for range 7 {
		time.Sleep(admin.DefaultSampleInterval)
		scrape(t, s)
	}
	mon.stop()
	var statuses, sweeps, samples []string
	for _, l := range mon.lines {
		switch {
		case strings.Contains(l, `"evalsha"`) && strings.Contains(l, `"qc:{`+r+`}:leases" "qc:{`+r+`}:leaked"`):
			sweeps = append(sweeps, l)
		case strings.Contains(l, `"evalsha"`) && strings.Contains(l, `"qc:{`+r+`}:limit"`):
			statuses = append(statuses, l)
		case strings.Contains(l, `"zadd" "qc:{`+r+`}:burn"`):
			samples = append(samples, l)
		}
	}
	if len(samples) == 0 {
		t.Fatalf("no burn sample of %s in 70 s: the sampler's full visit was not seen, nothing was checked (%d commands: %q)", r, len(mon.lines), mon.lines)
	}
	if len(sweeps) > 0 || len(statuses) > 1 {
		t.Fatalf("quiet %s over 70 s: %d sweeps and %d status reads, want 0 and at most 1 (the sampler's); commands: %q",
			r, len(sweeps), len(statuses), mon.lines)
	}
}
