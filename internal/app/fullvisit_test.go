package app_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/testenv"
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

// A change made through another instance reaches a quiet resource's gauges
// at once (the change log), not at a full visit: two instances on one Redis
// and MySQL, the resource used through the first and read quiet by the
// second's scrapes; a second use through the first shows in the second's
// scrape within seconds (bounded here by 20 s; the full visit of the
// scrape's statuses is 5 minutes, the sampler's 1 minute).
func TestQuietResourceChangedOnAnotherInstanceIsSeen(t *testing.T) {
	addr := privateRedis(t)
	dsn := testenv.MustMySQL(t)
	token := "fullvisit" + testenv.RandomSuffix()
	s1 := startOn(t, testenv.Real, []string{"--redis-addr", addr}, dsn, token, "--reconcile-interval", "10m")
	s2 := startOn(t, testenv.Real, []string{"--redis-addr", addr}, dsn, token, "--reconcile-interval", "10m")
	r := testenv.Resource(t)
	putPolicy(t, s1, r, map[string]any{"quotaType": "COUNT", "totalLimit": 1000})
	use := func(n int) {
		code, out, _ := call(t, s1, "POST", "/quota/apply", map[string]any{"resourceName": r, "clientId": "c", "applyAmount": n})
		if code != 200 {
			t.Fatalf("apply: %d %v", code, out)
		}
		if code, out, _ := call(t, s1, "POST", "/quota/finish", map[string]any{"resourceName": r, "sessionId": out["sessionId"], "clientId": "c", "actualUsedAmount": n}); code != 200 {
			t.Fatalf("finish: %d %v", code, out)
		}
	}
	remaining := func(want int) func() bool {
		return func() bool {
			return strings.Contains(scrape(t, s2), `quota_remaining_calls{resource="`+r+`"} `+strconv.Itoa(want)+"\n")
		}
	}
	use(1)
	testenv.Eventually(t, 30*time.Second, "the second instance's scrape showing 999 remaining", remaining(999))
	time.Sleep(3 * time.Second) // quiet: its reads are kept
	if !remaining(999)() {
		t.Fatal("the quiet resource's gauge changed without a change")
	}
	use(5)
	testenv.Eventually(t, 20*time.Second, "the second instance's scrape showing 994 remaining after a use through the first", remaining(994))
}
