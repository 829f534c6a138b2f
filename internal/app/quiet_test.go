package app_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// quietResource starts a server whose sweeper runs every 100 ms and whose
// reconciliation runs every 5 s, on a Redis of its own (privateRedis: servers of other packages'
// tests on the shared Redis would visit the resource after a restart of
// their own, which is right for them and noise here), makes a resource used
// by one finished session, and waits until the sweeper and the burn-rate
// sampler have visited it since: from then on, nothing changes it. It
// returns the server, the resource and the Redis's address.
func quietResource(t *testing.T) (*testenv.Server, string, string) {
	t.Helper()
	return quietResourceWith(t, "--reconcile-interval", "5s")
}

// quietResourceWith is quietResource with these serve flags instead of
// the reconciliation's every 5 s.
func quietResourceWith(t *testing.T, args ...string) (*testenv.Server, string, string) {
	t.Helper()
	addr := privateRedis(t)
	s := testenv.Start(t, testenv.Real, append([]string{"--sweep-interval", "100ms", "--redis-addr", addr}, args...)...)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "COUNT", "totalLimit": 1000})
	code, out, _ := call(t, s, "POST", "/quota/apply", map[string]any{"resourceName": r, "clientId": "c", "applyAmount": 1})
	if code != 200 {
		t.Fatalf("apply: %d %v", code, out)
	}
	if code, out, _ := call(t, s, "POST", "/quota/finish", map[string]any{"resourceName": r, "sessionId": out["sessionId"], "clientId": "c", "actualUsedAmount": 1}); code != 200 {
		t.Fatalf("finish: %d %v", code, out)
	}
	done := time.Now()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	// A burn sample taken after the finish: the sampler saw the change.
	testenv.Eventually(t, 30*time.Second, "a burn sample after the finish", func() bool {
		n, _ := rdb.ZCount(context.Background(), "qc:{"+r+"}:burn", "-inf", "+inf").Result()
		return n > 0 && time.Since(done) > admin.DefaultSampleInterval+time.Second
	})
	sweeps := metricValue(t, s, "quota_sweep_duration_seconds_count")
	testenv.Eventually(t, 10*time.Second, "3 sweeper passes", func() bool {
		return metricValue(t, s, "quota_sweep_duration_seconds_count") >= sweeps+3
	})
	return s, r, addr
}

// privateRedis starts a redis-server of this test's own on a free port
// (startRedis) and returns its address.
func privateRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	startRedis(t, port)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// Issue 23 §1: a resource used within the window but quiet now costs the
// per-tick loops and the scrapes no Redis command. Counted with MONITOR
// over the sweeper passes of ~13 s, a burn-rate sampler tick, two or more
// reconciliation passes (every 5 s; the resource's next full visit is 50 s
// after its last) and 3 scrapes (balance, forecast and pool gauges): no
// command names the resource. Before, each sweeper pass ran expired.lua on
// it, each sampler tick balance.lua and a ZADD, and each reconciliation
// pass its lock, fail-open list, limit and balance reads.
func TestQuietUsedResourceCostsNoCommandPerTick(t *testing.T) {
	s, r, addr := quietResource(t)
	sweeps := metricValue(t, s, "quota_sweep_duration_seconds_count")
	scrape(t, s) // the scrape's reads of the resource, kept from here on
	// A sampler tick, ~100 sweeper passes (every 100 ms) and 3 scrapes.
	mon := monitorRedis(t, addr, "{"+r+"}")
	for range 3 {
		time.Sleep(admin.DefaultSampleInterval/3 + time.Second)
		scrape(t, s)
	}
	n, first := mon.stop()
	passes := metricValue(t, s, "quota_sweep_duration_seconds_count") - sweeps
	if n > 0 {
		t.Fatalf("%d Redis commands named the quiet resource %s during %v sweeper passes, a sampler tick and 3 scrapes, want 0; the first: %s", n, r, passes, first)
	}
	if passes < 5 {
		t.Fatalf("only %v sweeper passes while the monitor counted: nothing was checked", passes)
	}
}

// A change to a quiet resource is seen: a session applied with a 1 s lease
// and never finished is marked LEAKED by the sweeper once its lease runs
// out (the lease's end is the sweeper's own time for it, with no further
// change); and after the change log is lost (Redis restarted without it:
// both keys deleted), the sweeper visits the quiet resource again.
func TestQuietResourceChangesAndLostChangeLogAreSeen(t *testing.T) {
	s, r, addr := quietResource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "COUNT", "totalLimit": 1000, "leakThresholdSeconds": 1})
	if code, out, _ := call(t, s, "POST", "/quota/apply", map[string]any{"resourceName": r, "clientId": "c", "applyAmount": 5}); code != 200 {
		t.Fatalf("apply: %d %v", code, out)
	}
	leaked := `quota_sessions_leaked_total{resource="` + r + `"}`
	testenv.Eventually(t, 30*time.Second, "the unfinished session marked LEAKED", func() bool {
		return metricValue(t, s, leaked) >= 1
	})
	// Quiet again: wait for passes that find nothing, then lose the log.
	sweeps := metricValue(t, s, "quota_sweep_duration_seconds_count")
	testenv.Eventually(t, 10*time.Second, "3 sweeper passes", func() bool {
		return metricValue(t, s, "quota_sweep_duration_seconds_count") >= sweeps+3
	})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	mon := monitorRedis(t, addr, "{"+r+"}:leases")
	if err := rdb.Del(context.Background(), activity.EpochKey, activity.ChangedKey).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "a sweep of the quiet resource after the change log was lost", func() bool {
		mon.mu.Lock()
		defer mon.mu.Unlock()
		return mon.n > 0
	})
	mon.stop()
}
