package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testcluster"
)

// benchResources returns n fresh resource names, seeded, whose slots are on
// masters of the cluster (one master when spread is false, all of them in
// turn when true); on one server any n names.
func benchResources(b *testing.B, s *Store, rdb redis.UniversalClient, n int, spread bool) ([]string, quota.Period) {
	b.Helper()
	now, err := rdb.Time(ctxT(b)).Result()
	if err != nil {
		b.Fatal(err)
	}
	per := quota.Period{Start: now.Add(-time.Hour).Truncate(time.Millisecond), End: now.Add(time.Hour).Truncate(time.Millisecond)}
	cc, isCluster := rdb.(*redis.ClusterClient)
	var masters []string
	perMaster := map[string]int{}
	var out []string
	for i := 0; len(out) < n; i++ {
		r := newResource(b, rdb)
		if isCluster {
			m, err := cc.MasterForKey(ctxT(b), limitKey(r))
			if err != nil {
				b.Fatal(err)
			}
			addr := m.Options().Addr
			if perMaster[addr] == 0 {
				masters = append(masters, addr)
			}
			switch {
			case !spread && addr != masters[0]:
				continue
			case spread && perMaster[addr] >= (n+2)/3:
				continue
			}
			perMaster[addr]++
		}
		if _, err := s.Seed(ctxT(b), r, per, 1<<50, quota.PeriodTotals{}, nil, time.Minute); err != nil {
			b.Fatal(err)
		}
		out = append(out, r)
	}
	if isCluster {
		b.Logf("resources per master: %v", perMaster)
	}
	return out, per
}

// BenchmarkApplyFinish runs apply then finish of a new session, 64 at a
// time, over 12 resources, auto-pipelined as quota-center serve does: on
// the real Redis, on the test cluster with every resource on one master and
// spread over its three masters, and spread with WAIT for one replica.
// ns/op is per session (two script calls). Run with
// go test -run '^$' -bench ApplyFinish ./internal/redisstore/
// (figures in docs/performance.md, "Redis Cluster").
func BenchmarkApplyFinish(b *testing.B) {
	for _, c := range []struct {
		name    string
		cluster bool
		spread  bool
		wait    int
	}{
		{"redis", false, false, 0},
		{"cluster-one-master", true, false, 0},
		{"cluster-three-masters", true, true, 0},
		{"cluster-three-masters-wait1", true, true, 1},
		{"cluster-one-master-wait1", true, false, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			var rdb redis.UniversalClient
			if c.cluster {
				rdb = testcluster.Client(b)
			} else {
				rdb = MustRedis(b)
			}
			s := NewPipelined(rdb, DefaultPipelining)
			b.Cleanup(s.Close)
			if c.wait > 0 {
				s.WithWait(Wait{Replicas: c.wait, Timeout: 100 * time.Millisecond})
			}
			res, per := benchResources(b, s, rdb, 12, c.spread)
			var seq atomic.Int64
			b.SetParallelism(32) // 64 concurrent sessions on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := seq.Add(1)
					r := res[int(i)%len(res)]
					id := fmt.Sprintf("b%d", i)
					if _, err := s.Apply(ctxT(b), quota.ApplyCmd{ResourceName: r, SessionID: id, Amount: 10, Period: per, Lease: time.Minute}); err != nil {
						b.Error(err)
						return
					}
					if _, err := s.Finish(ctxT(b), quota.FinishCmd{ResourceName: r, SessionID: id, Actual: 3, Retention: time.Minute}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sessions/s")
		})
	}
}
