package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// idlePolicies is how many idle policies the test puts beside one busy one.
const idlePolicies = 2000

// Issue 23 §1: with thousands of policies and no traffic on them, the
// background loops (sweeper, reconciliation, failover watch, pool
// controller) and a /metrics scrape cost nothing per idle resource. Before,
// every pass asked Redis about every resource (10k idle policies made ~10k
// Redis commands/s) and every scrape read every balance. Counted, not
// timed: no Redis command of the watched passes and scrapes names an idle
// resource, and no series of the scrape does.
func TestIdlePoliciesCostNoBackgroundWork(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--reconcile-interval", "200ms", "--reconcile-settle", "50ms")
	prefix := "idle-" + testenv.RandomSuffix() + "-"
	insertIdlePolicies(t, s, prefix, idlePolicies)
	busy := testenv.Resource(t)
	putPolicy(t, s, busy, map[string]any{"quotaType": "COUNT", "totalLimit": 1000})
	if code, out, _ := call(t, s, "POST", "/quota/apply", map[string]any{"resourceName": busy, "clientId": "c", "applyAmount": 1}); code != 200 {
		t.Fatalf("apply on %s: %d %v", busy, code, out)
	}

	mon := monitorRedis(t, testenv.RedisAddr(), prefix)
	sweeps, runs := metricValue(t, s, "quota_sweep_duration_seconds_count"), metricValue(t, s, `quota_reconcile_runs_total{result="ok"}`)
	var body string
	testenv.Eventually(t, 30*time.Second, "5 sweeper passes, 3 reconciliations and 3 scrapes", func() bool {
		body = scrape(t, s)
		return metricValue(t, s, "quota_sweep_duration_seconds_count") >= sweeps+5 &&
			metricValue(t, s, `quota_reconcile_runs_total{result="ok"}`) >= runs+3
	})
	if n, first := mon.stop(); n > 0 {
		t.Errorf("%d Redis commands named one of %d idle resources during the background passes and scrapes, want 0; the first: %s", n, idlePolicies, first)
	}
	if strings.Contains(body, prefix) {
		i := strings.Index(body, prefix)
		t.Errorf("/metrics has series of idle resources, e.g. %q", body[max(0, i-60):min(len(body), i+40)])
	}
	if !strings.Contains(body, `quota_remaining_calls{resource="`+busy+`"}`) {
		t.Errorf("/metrics lacks the busy resource's balance gauge")
	}
}

// insertIdlePolicies writes n policies straight into the ledger, as if
// created long ago (an API PUT is a change: it makes its resource active).
func insertIdlePolicies(t *testing.T, s *testenv.Server, prefix string, n int) {
	t.Helper()
	var vals []string
	var args []any
	now := time.Now().UnixMilli()
	for i := range n {
		vals = append(vals, "(?, 'COUNT', 100, '', 'UTC', 300, 'CLOSED', ?, ?)")
		args = append(args, fmt.Sprintf("%s%05d", prefix, i), now, now)
	}
	if _, err := s.Ledger.Exec(`INSERT INTO quota_policy (resource_name, quota_type, total_limit, reset_cron, timezone,
		leak_threshold_seconds, fail_mode, created_ms, updated_ms) VALUES `+strings.Join(vals, ","), args...); err != nil {
		t.Fatalf("insert idle policies: %v", err)
	}
}

func scrape(t *testing.T, s *testenv.Server) string {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return string(b)
}

// monitor counts the commands Redis serves that contain a string, read
// from a MONITOR connection of its own.
type monitor struct {
	conn  net.Conn
	done  chan struct{}
	mu    sync.Mutex
	n     int
	first string
	lines []string        // the commands counted
	seen  map[string]bool // marks echoed through this monitor
}

// monitorRedis watches the Redis at addr with MONITOR from now until stop,
// counting the commands whose line contains needle.
func monitorRedis(t *testing.T, addr, needle string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	m := &monitor{conn: conn, done: make(chan struct{}), seen: map[string]bool{}}
	mark := "monitor-mark-" + testenv.RandomSuffix()
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			m.mu.Lock()
			if strings.Contains(line, mark) {
				m.seen[mark] = true
			}
			if strings.Contains(line, needle) {
				if m.n == 0 {
					m.first = line
				}
				m.n++
				m.lines = append(m.lines, line)
			}
			m.mu.Unlock()
		}
	}()
	// MONITOR streams the commands served after it answered OK: wait for
	// a command of ours to show.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	testenv.Eventually(t, 5*time.Second, "MONITOR streaming", func() bool {
		_ = rdb.Echo(context.Background(), mark).Err()
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.seen[mark]
	})
	return m
}

// stop ends the monitor; it answers the commands counted and the first.
func (m *monitor) stop() (int, string) {
	_ = m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n, m.first
}
