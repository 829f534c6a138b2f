package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testcluster"
)

// Cluster is the mode of a test server on the test Redis Cluster (3
// masters, 3 replicas; see internal/testcluster) and the real MySQL.
const Cluster Mode = "cluster"

// MustRedisCluster makes sure the test Redis Cluster answers (starting it
// if need be) and returns its addresses; see testcluster.Must.
func MustRedisCluster(tb testing.TB) []string {
	tb.Helper()
	return testcluster.Must(tb)
}

// RedisArgs are the quota-center flags of the Redis a server of mode runs
// on: --redis-addr of the real Redis, or the test cluster's addresses with
// --redis-mode cluster.
func RedisArgs(tb testing.TB, mode Mode) []string {
	tb.Helper()
	if mode == Cluster {
		return []string{"--redis-addr", strings.Join(MustRedisCluster(tb), ","), "--redis-mode", "cluster"}
	}
	return []string{"--redis-addr", MustRedis(tb)}
}

// RedisClient returns a client of the Redis a server of mode runs on (the
// real Redis or the test cluster), closed when the test ends.
func RedisClient(tb testing.TB, mode Mode) redis.UniversalClient {
	tb.Helper()
	switch mode {
	case Cluster:
		return testcluster.Client(tb)
	case Real:
		rdb := redis.NewClient(&redis.Options{Addr: MustRedis(tb)})
		tb.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	tb.Fatalf("mode %s has no shared Redis", mode)
	return nil
}

// dropClusterKeys deletes a test resource's keys from the test cluster if
// this process used it.
func dropClusterKeys(tb testing.TB, resource string) {
	if !testcluster.Used() {
		return
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testcluster.Addrs()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := testcluster.ScanKeys(ctx, rdb, "qc:{"+resource+"}:*")
	if err == nil && len(keys) > 0 {
		err = rdb.Unlink(ctx, keys...).Err() // one slot: one node
	}
	if err != nil {
		tb.Logf("cleanup of %s's Redis Cluster keys: %v", resource, err)
	}
}
