package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testcluster"
)

// A Redis Cluster master that stops answering must fail only the pipelined
// calls of its own slots. Before, one pipeline carried the calls of every
// master through go-redis's cluster pipeline, which, once the stalled
// master's read timed out and the pipeline's context ended before its retry,
// set that error on every call of the pipeline: calls the healthy masters
// had answered (their scripts ran) returned "context deadline exceeded" and
// opened those masters' breakers too (seen with quota-center serve: the
// breaker of 127.0.0.1:22000 opened with the SIGSTOPped 22002's).
func TestAStalledMasterFailsOnlyItsOwnPipelinedCalls(t *testing.T) {
	const timeout = 300 * time.Millisecond
	stalled := newEnv(t, "cluster")
	ctx := ctxT(t)
	m1, err := masterFor(ctx, stalled.rdb, limitKey(stalled.res))
	if err != nil {
		t.Fatal(err)
	}
	var healthy *env
	for range 50 {
		e := newEnv(t, "cluster")
		m2, err := masterFor(ctx, e.rdb, limitKey(e.res))
		if err != nil {
			t.Fatal(err)
		}
		if m2.(*redis.Client).Options().Addr != m1.(*redis.Client).Options().Addr {
			healthy = e
			break
		}
	}
	if healthy == nil {
		t.Fatal("no resource on another master in 50 tries")
	}
	// Production's client: the read timeout is the pipeline's budget.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testcluster.Addrs(), ReadTimeout: timeout, WriteTimeout: timeout})
	t.Cleanup(func() { _ = rdb.Close() })
	s := NewPipelined(rdb, Pipelining{MaxCalls: 128, InFlight: 1, Timeout: timeout})
	t.Cleanup(s.Close)
	perS, perH := stalled.current(t), healthy.current(t)
	stalled.seed(t, perS, 1000, quota.PeriodTotals{})
	healthy.seed(t, perH, 1000, quota.PeriodTotals{})
	// The client knows the slots before the master stalls (as a server's
	// does after its first calls): a first slot map read could go to it.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if err := m1.(*redis.Client).ClientPause(ctx, 3*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m1.(*redis.Client).Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
	// The first call holds the only pipeline slot on the stalled master, so
	// the next two share the next pipeline.
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = s.Apply(ctx, stalled.cmd("s0", 1, 0, perS))
	}()
	time.Sleep(50 * time.Millisecond)
	var wg sync.WaitGroup
	var res quota.ApplyResult
	var herr error
	wg.Go(func() { _, _ = s.Apply(ctx, stalled.cmd("s1", 1, 0, perS)) })
	wg.Go(func() { res, herr = s.Apply(ctx, healthy.cmd("h1", 7, 0, perH)) })
	wg.Wait()
	<-first
	if herr != nil || res.Outcome != quota.ApplyGranted || res.Granted != 7 {
		t.Fatalf("apply on the healthy master: %+v, %v; want 7 granted", res, herr)
	}
	wantBalance(t, healthy.balance(t, perH), 1000, 0, 7)
}
