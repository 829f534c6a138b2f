package app_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// sentinelBase: the ports of this test's private master (7420), replica
// (7421) and Sentinel (7430): apart from the slot-move test's private
// cluster (7400-7405) and CI's shared one (7000-7005).
const sentinelBase = 7420

// startRedis runs a redis-server (or, with --sentinel, a Sentinel) from the
// machine's binary on port with extra arguments, in its own directory under
// t.TempDir(), and kills it when the test ends. A server left on port by an
// earlier run that was killed is shut down first: the test must not take a
// stranger's answers for its own server's.
func startRedis(t *testing.T, port int, extra ...string) {
	t.Helper()
	clearPort(t, port)
	dir := filepath.Join(t.TempDir(), strconv.Itoa(port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log")}
	if len(extra) > 0 && extra[0] == "--sentinel" {
		conf := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites its config file
		if err := os.WriteFile(conf, []byte(strings.Join(extra[1:], "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append([]string{conf, "--sentinel"}, args[:8]...)
	} else {
		args = append(args, extra...)
	}
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		if testenv.Required() {
			t.Fatalf("redis-server: %v", err)
		}
		t.Skipf("redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer c.Close()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("redis on %d", port), func() bool { return c.Ping(t.Context()).Err() == nil })
}

// clearPort shuts down whatever Redis (or Sentinel) answers on port and
// waits until the port is free; it fails the test if the port stays taken.
func clearPort(t *testing.T, port int) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if c.Ping(t.Context()).Err() != nil {
		return
	}
	t.Logf("port %d: a server left by an earlier run answers; shutting it down", port)
	_ = c.Do(t.Context(), "SHUTDOWN", "NOSAVE").Err() // the connection drops as it stops
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("port %d free", port), func() bool {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return true
		}
		_ = conn.Close()
		return false
	})
}

// quota-center in sentinel mode finds the master through the Sentinel and
// serves applies and finishes on it.
func TestSentinelModeServesFromTheMasterTheSentinelNames(t *testing.T) {
	master, replica, sentinel := sentinelBase, sentinelBase+1, sentinelBase+10
	startRedis(t, master)
	startRedis(t, replica, "--replicaof", "127.0.0.1", strconv.Itoa(master))
	startRedis(t, sentinel, "--sentinel",
		fmt.Sprintf("sentinel monitor qc 127.0.0.1 %d 1", master),
		"sentinel down-after-milliseconds qc 1000")
	dsn := testenv.MustMySQL(t)
	s := startOn(t, testenv.Real, []string{"--redis-mode", "sentinel", "--redis-addr", fmt.Sprintf("127.0.0.1:%d", sentinel),
		"--redis-master", "qc"}, dsn, "sentinel-"+testenv.RandomSuffix()+testenv.RandomSuffix())
	r := "sentinel-" + testenv.RandomSuffix()
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 100})
	code, out := callRetry(t, s, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 30, "sessionId": "s1", "clientId": "c"})
	if code != http.StatusOK {
		t.Fatalf("apply: %d %v", code, out)
	}
	if code, out = callRetry(t, s, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "s1", "actualUsedAmount": 12}); code != http.StatusOK {
		t.Fatalf("finish: %d %v", code, out)
	}
	// The balance is on the master the Sentinel named.
	m := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", master)})
	defer m.Close()
	keys, err := m.Keys(t.Context(), "qc:{"+r+"}:b:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("balance keys on the master: %v, %v", keys, err)
	}
	if charged, _ := m.HGet(t.Context(), keys[0], "charged").Result(); charged != "12" {
		t.Fatalf("charged %q on the master, want 12", charged)
	}
	if st, _ := getStatus(t, s, r); st.used != 12 || st.remaining != 88 {
		t.Fatalf("status %+v", st)
	}
}
