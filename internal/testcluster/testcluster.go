package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultBasePort is the first port of the shared test cluster
// (127.0.0.1:7000-7005).
const DefaultBasePort = 7000

// Addrs is QC_TEST_REDIS_CLUSTER_ADDRS (comma-separated) or the six nodes
// of the shared test cluster, 127.0.0.1:7000-7005.
func Addrs() []string {
	if v := os.Getenv("QC_TEST_REDIS_CLUSTER_ADDRS"); v != "" {
		return strings.Split(v, ",")
	}
	return Ports(DefaultBasePort)
}

// Ports lists the six addresses of a cluster of redis-cluster.sh starting
// at base.
func Ports(base int) []string {
	out := make([]string, 6)
	for i := range out {
		out[i] = fmt.Sprintf("127.0.0.1:%d", base+i)
	}
	return out
}

var (
	once    sync.Once
	onceErr error
	mu      sync.Mutex
	used    bool
)

// Must makes sure the shared test cluster answers and returns its
// addresses. Unless QC_TEST_REDIS_CLUSTER_ADDRS names another one, it
// starts the cluster with scripts/redis-cluster.sh when it is not up
// (idempotent; a few seconds, once per test binary). It skips the test when
// that fails, or fails it when QC_TEST_REQUIRE_BACKENDS=1.
func Must(tb testing.TB) []string {
	tb.Helper()
	addrs := Addrs()
	once.Do(func() {
		if os.Getenv("QC_TEST_REDIS_CLUSTER_ADDRS") == "" {
			onceErr = Start(DefaultBasePort, "")
		}
		if onceErr == nil {
			onceErr = ping(addrs)
		}
	})
	if onceErr != nil {
		const start = "bash scripts/redis-cluster.sh start (needs redis-server and redis-cli)"
		if os.Getenv("QC_TEST_REQUIRE_BACKENDS") == "1" {
			tb.Fatalf("Redis Cluster not reachable at %s (QC_TEST_REQUIRE_BACKENDS=1): %v", strings.Join(addrs, ","), onceErr)
		}
		tb.Skipf("SKIP Redis Cluster test: not reachable at %s (%v); start it with: %s", strings.Join(addrs, ","), onceErr, start)
	}
	mu.Lock()
	used = true
	mu.Unlock()
	return addrs
}

// Used reports whether this process called Must successfully (so that
// cleanups touch the cluster only then).
func Used() bool {
	mu.Lock()
	defer mu.Unlock()
	return used
}

// Client returns a cluster client of the shared test cluster, closed when
// the test ends.
func Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: Must(tb), DialTimeout: 2 * time.Second, PoolSize: 64})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Start runs `scripts/redis-cluster.sh start base` (dir "" = the script's
// default directory, /tmp/qc-redis-cluster-<base>); env adds variables
// such as QC_REDIS_CLUSTER_NODE_TIMEOUT=1000.
func Start(base int, dir string, env ...string) error { return script("start", base, dir, env...) }

// Stop runs `scripts/redis-cluster.sh stop base`: the cluster's servers stop
// and its directory is removed.
func Stop(base int, dir string) error { return script("stop", base, dir) }

// PID reads the pid of the node on port of a cluster started in dir ("" =
// the default directory of base).
func PID(base, port int, dir string) (int, error) {
	if dir == "" {
		dir = fmt.Sprintf("/tmp/qc-redis-cluster-%d", base)
	}
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(port), "redis.pid"))
	if err != nil {
		return 0, err
	}
	var pid int
	_, err = fmt.Sscan(strings.TrimSpace(string(b)), &pid)
	return pid, err
}

func script(cmd string, base int, dir string, env ...string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	c := exec.Command("bash", filepath.Join(root, "scripts", "redis-cluster.sh"), cmd, fmt.Sprint(base))
	c.Env = os.Environ()
	if dir != "" {
		c.Env = append(c.Env, "QC_REDIS_CLUSTER_DIR="+dir)
	}
	c.Env = append(c.Env, env...)
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/redis-cluster.sh %s %d: %w: %s", cmd, base, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// repoRoot is the directory of go.mod above the working directory (a test
// runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// ping checks that every master of the cluster answers.
func ping(addrs []string) error {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
}

// ScanKeys lists the keys matching pattern on every master of rdb (one
// server, or each master of a cluster).
func ScanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.UniversalClient) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}

// Required reports whether CI asked for every backend (QC_TEST_REQUIRE_BACKENDS=1).
func Required() bool { return os.Getenv("QC_TEST_REQUIRE_BACKENDS") == "1" }
