package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// replicaOf returns a client of the replica that serves key's slot on the
// test cluster, reading with READONLY.
func replicaOf(t *testing.T, rdb redis.UniversalClient, key string) *redis.Client {
	t.Helper()
	cc := rdb.(*redis.ClusterClient)
	slot, err := cc.ClusterKeySlot(ctxT(t), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := clusterMasters(ctxT(t), cc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.start <= slot && slot <= s.end {
			if len(s.replicas) == 0 {
				t.Fatalf("slot %d has no replica: %+v", slot, s)
			}
			r := redis.NewClient(&redis.Options{Addr: s.replicas[0], OnConnect: func(ctx context.Context, cn *redis.Conn) error {
				return cn.ReadOnly(ctx).Err()
			}})
			t.Cleanup(func() { _ = r.Close() })
			return r
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return nil
}

// With Wait on, every answered call's change is on the replica by the time
// the call returns: the guarantee a failover relies on.
func TestWaitAnswersOnlyWhatTheReplicaHas(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"cluster", "cluster/pipelined"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, b)
			var short atomic.Int64
			e.s.WithWait(Wait{Replicas: 1, Timeout: 5 * time.Second, OnShort: func(n int) { short.Add(int64(n)) }})
			replica := replicaOf(t, e.rdb, limitKey(e.res))
			per := e.current(t)
			e.seed(t, per, 1000, quota.PeriodTotals{})
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for i := range 40 {
				wg.Go(func() {
					id := fmt.Sprintf("s%d", i)
					if _, err := e.s.Apply(ctxT(t), e.cmd(id, 5, 0, per)); err != nil {
						errs <- err
						return
					}
					// Read at once, on the replica.
					st, err := replica.HGet(ctxT(t), sessionKey(e.res, id), "status").Result()
					if err != nil {
						errs <- fmt.Errorf("apply %s answered, replica read: %w", id, err)
						return
					}
					if st != "USING" {
						errs <- fmt.Errorf("apply %s answered, replica has status %q", id, st)
						return
					}
					if i%2 == 0 {
						if _, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: id, Actual: 2, Retention: time.Hour}); err != nil {
							errs <- err
							return
						}
						if st, _ := replica.HGet(ctxT(t), sessionKey(e.res, id), "status").Result(); st != "FINISHED" {
							errs <- fmt.Errorf("finish %s answered, replica has status %q", id, st)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := short.Load(); n != 0 {
				t.Fatalf("%d calls short of a replica on a healthy cluster", n)
			}
			raw, err := replica.HMGet(ctxT(t), balanceKey(e.res, per.ID()), "charged", "reserved").Result()
			if err != nil || raw[0] != "40" || raw[1] != "100" {
				t.Fatalf("replica's balance %v (%v), want charged 40 reserved 100", raw, err)
			}
		})
	}
}

// Asking for more replicas than there are never refuses service: the calls
// are answered after the timeout and counted as short.
func TestWaitForMissingReplicasAnswersAndCounts(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"cluster", "redis/pipelined", "miniredis"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, b)
			var short atomic.Int64
			e.s.WithWait(Wait{Replicas: 2, Timeout: 10 * time.Millisecond, OnShort: func(n int) { short.Add(int64(n)) }})
			per := e.current(t)
			e.seed(t, per, 100, quota.PeriodTotals{})
			e.grant(t, e.cmd("a", 10, 0, per), 10)
			e.finish(t, "a", 4)
			if err := e.s.Cancel(ctxT(t), e.res, "a"); err != nil {
				t.Fatal(err)
			}
			wantBalance(t, e.balance(t, per), 100, 4, 0)
			// seed, apply, finish (one guess: right), cancel (nothing to give back)
			if n := short.Load(); n < 4 {
				t.Fatalf("%d calls counted short, want at least 4", n)
			}
		})
	}
}
