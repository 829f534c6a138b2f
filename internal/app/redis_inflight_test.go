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

// TestHotStoreSessionRecord: QC_REDIS_SESSION_RECORD=hash makes the hot
// store write new sessions in the full form (redisstore.Store.HashSessions),
// packed (the default) does not.
func TestHotStoreSessionRecord(t *testing.T) {
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer one.Close()
	for _, c := range []struct {
		record string
		hash   bool
	}{{config.SessionRecordPacked, false}, {config.SessionRecordHash, true}} {
		s := hotStore(one, config.Redis{SessionRecord: c.record, PipelineMaxCalls: 8}, nil, nil)
		if s.HashSessions != c.hash {
			t.Errorf("session record %q: HashSessions %v, want %v", c.record, s.HashSessions, c.hash)
		}
		s.Close()
	}
	if d, _, err := config.Load("serve", []string{"--redis-addr", "a:1", "--mysql-dsn", "u@tcp(b:3306)/qc", "--insecure-open-quota"}); err != nil || d.Redis.SessionRecord != config.SessionRecordPacked {
		t.Fatalf("default session record: %+v %v, want packed", d.Redis.SessionRecord, err)
	}
}
