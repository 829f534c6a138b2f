package app

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/config"
)

// TestHotPipelinesInFlight: one pipeline out at a time on one Redis (the
// calls of the others gather into the next: fewer reads and writes for
// Redis per apply, issue 23 §3 (c)), two when each pipeline also waits for
// replicas, four on a cluster (a master stuck on a moving slot leaves
// pipelines for the others).
func TestHotPipelinesInFlight(t *testing.T) {
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer one.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
		cfg  config.Redis
		want int
	}{
		{"one server", one, config.Redis{}, 1},
		{"one server with WAIT", one, config.Redis{WaitReplicas: 1}, 2},
		{"cluster", cluster, config.Redis{}, 4},
		{"cluster with WAIT", cluster, config.Redis{WaitReplicas: 1}, 4},
	} {
		if got := hotInFlight(c.rdb, c.cfg); got != c.want {
			t.Errorf("%s: %d pipelines in flight, want %d", c.name, got, c.want)
		}
	}
}
