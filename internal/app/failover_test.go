package app_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testcluster"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// failoverBase: the private cluster of this test (7300-7305), killed in
// part; the shared test cluster (7000-7005) is never touched.
const failoverBase = 7300

// A master of the cluster is killed while clients apply and finish through
// quota-center: its replica takes over, the instance notices the new master
// and rebuilds the resource from the ledger, and after that Redis and the
// ledger agree. Clients see 503s during the failover and retry.
func TestFailoverRebuildsTheResourceAndRedisAgreesWithTheLedger(t *testing.T) {
	dir := t.TempDir()
	_ = testcluster.Stop(failoverBase, dir)
	if err := testcluster.Start(failoverBase, dir, "QC_REDIS_CLUSTER_NODE_TIMEOUT=1000"); err != nil {
		if testenv.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Cleanup(func() {
		if err := testcluster.Stop(failoverBase, dir); err != nil {
			t.Errorf("stop the private cluster: %v", err)
		}
	})
	addrs := testcluster.Ports(failoverBase)
	dsn := testenv.MustMySQL(t)
	s := startOn(t, testenv.Cluster, []string{"--redis-addr", strings.Join(addrs, ","), "--redis-mode", "cluster",
		"--reconcile-settle", "500ms"}, dsn, "failover-"+testenv.RandomSuffix()+testenv.RandomSuffix())
	r := "failover-" + testenv.RandomSuffix()
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1 << 40})

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer rdb.Close()
	m, err := rdb.MasterForKey(t.Context(), "qc:{"+r+"}:limit")
	if err != nil {
		t.Fatal(err)
	}
	master := m.Options().Addr
	port, _ := strconv.Atoi(master[strings.LastIndex(master, ":")+1:])
	pid, err := testcluster.PID(failoverBase, port, dir)
	if err != nil {
		t.Fatal(err)
	}

	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("f%d-%d", w, i)
				code, out := callRetry(t, s, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 10, "sessionId": id, "clientId": "c"})
				if code != http.StatusOK {
					t.Errorf("apply %s: %d %v", id, code, out)
					return
				}
				if i%2 == 0 {
					code, out = callRetry(t, s, "/quota/finish", map[string]any{"resourceName": r, "sessionId": id, "actualUsedAmount": 4})
					if code != http.StatusOK {
						t.Errorf("finish %s: %d %v", id, code, out)
						return
					}
				}
				done.Add(1)
			}
		})
	}
	testenv.Eventually(t, 30*time.Second, "100 sessions before the kill, and the watcher to know the resource's master", func() bool {
		return done.Load() >= 100 && metricValue(t, s, "quota_redis_failover_watched_resources") >= 1
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s (pid %d): %v", master, pid, err)
	}
	atKill := done.Load()
	testenv.Eventually(t, 60*time.Second, "100 sessions after the failover", func() bool { return done.Load() >= atKill+100 })
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	testenv.Eventually(t, 20*time.Second, "the instance to rebuild the resource", func() bool {
		return metricValue(t, s, "quota_redis_failover_repairs_total") >= 1
	})
	// After the rebuild and its reconciliation, Redis holds what the ledger holds.
	var last string
	defer func() {
		if t.Failed() {
			t.Log(last)
		}
	}()
	testenv.Eventually(t, 30*time.Second, "status to equal the ledger", func() bool {
		st, _ := getStatus(t, s, r)
		charged, reserved, _ := ledgerSums(t, s, r)
		last = fmt.Sprintf("status %+v, ledger charged %d reserved %d", st, charged, reserved)
		return st.used == charged && st.reserved == reserved
	})
	st, _ := getStatus(t, s, r)
	charged, reserved, rows := ledgerSums(t, s, r)
	t.Logf("%d sessions (%d before the kill); ledger rows %d charged %d reserved %d; status %+v", done.Load(), atKill, rows, charged, reserved, st)
}
