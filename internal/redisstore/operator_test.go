package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The live session map walks the lease index page by page: every USING
// session comes once, the latest lease first, also when many share a lease
// millisecond (a page boundary inside a tie); finished ones are left out.
func TestLiveSessionsPagesThroughTies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 1000, quota.PeriodTotals{})
		leases := []int64{5000, 5000, 5000, 4000, 4000, 3000, 2000, 2000}
		var want []string
		for i, l := range leases {
			id := fmt.Sprintf("s%d", i)
			e.grant(t, e.cmd(id, 10, 0, per), 10)
			// Lease expiries set by hand to make ties.
			if err := e.rdb.ZAdd(ctxT(t), leasesKey(e.res), redis.Z{Score: float64(per.Start.UnixMilli() + l), Member: id}).Err(); err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		e.grant(t, e.cmd("done", 10, 0, per), 10)
		e.finish(t, "done", 3)
		for _, count := range []int{1, 2, 3, 8, 20} {
			var got []string
			var pos quota.LivePos
			var prevLease time.Time
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatalf("count %d: no end after 20 pages", count)
				}
				ss, next, more, err := e.s.LiveSessions(ctxT(t), e.res, pos, count)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range ss {
					if !prevLease.IsZero() && s.LeaseExpiresAt.After(prevLease) {
						t.Fatalf("count %d: %s's lease %v after the previous %v", count, s.SessionID, s.LeaseExpiresAt, prevLease)
					}
					prevLease = s.LeaseExpiresAt
					if s.ClientID != "client-1" || s.Granted != 10 || !s.PeriodStart.Equal(per.Start) {
						t.Fatalf("session %+v", s)
					}
					got = append(got, s.SessionID)
				}
				pos = next
				if !more {
					break
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("count %d: got %v, want each of %v once", count, got, want)
			}
		}
		n, err := e.s.LiveCount(ctxT(t), e.res)
		if err != nil || n != int64(len(leases)) {
			t.Fatalf("LiveCount = %d, %v; want %d", n, err, len(leases))
		}
	})
}

func TestBurnSamplesKeepTheWindow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		t0 := e.now(t)
		per := time.UnixMilli(1_700_000_000_000).UTC()
		keep := burnTrimEvery + 30*time.Second // samples burnTrimEvery apart: each trims
		for i, c := range []int64{10, 20, 35} {
			smp := quota.BurnSample{At: t0.Add(time.Duration(i) * burnTrimEvery), PeriodStart: per, Consumed: c}
			if err := e.s.RecordBurn(ctxT(t), e.res, smp, keep); err != nil {
				t.Fatal(err)
			}
		}
		got, err := e.s.BurnSamples(ctxT(t), e.res, t0.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		// The third sample trimmed the first (older than keep before it).
		want := []quota.BurnSample{
			{At: t0.Add(burnTrimEvery), PeriodStart: per, Consumed: 20},
			{At: t0.Add(2 * burnTrimEvery), PeriodStart: per, Consumed: 35},
		}
		if !slices.Equal(got, want) {
			t.Fatalf("samples %+v, want %+v", got, want)
		}
		got, err = e.s.BurnSamples(ctxT(t), e.res, t0.Add(burnTrimEvery+30*time.Second))
		if err != nil || len(got) != 1 || got[0].Consumed != 35 {
			t.Fatalf("samples since t0+90s: %+v, %v", got, err)
		}
	})
}

func TestSharedSecretIsTheSameForEveryCaller(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		name := "test-" + e.res
		t.Cleanup(func() { e.rdb.Del(ctxT(t), SecretKey(name)) })
		a, err := e.s.SharedSecret(ctxT(t), name, 32)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(e.rdb).SharedSecret(ctxT(t), name, 32)
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != 32 || !bytes.Equal(a, b) {
			t.Fatalf("secrets %x and %x: want the same 32 bytes", a, b)
		}
	})
}

// cmdHook counts the commands sent through a client, by name, leaving out
// those a new connection sends.
type cmdHook struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cmdHook) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "client", "select", "auth", "ping": // a new connection's set-up
		default:
			h.n[c.Name()]++
		}
	}
}
func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// Sampling every 10 s for two minutes sends one ZADD per sample and trims
// (ZREMRANGEBYSCORE and PEXPIRE) once per burnTrimEvery (4 min): 15
// commands where a MULTI per sample sent 65 (and a trim each 50 s, 19);
// the samples read back are those of trimming every time, the TTL outlives
// the newest sample by keep until the next trim, which drops the old ones.
func TestRecordBurnTrimsOncePerTrimInterval(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		hook := &cmdHook{n: map[string]int{}}
		rdb := e.sameClient(t)
		rdb.AddHook(hook)
		s := New(rdb)
		t0 := e.now(t)
		per := time.UnixMilli(1_700_000_000_000).UTC()
		keep := 90 * time.Second
		for i := range 13 {
			smp := quota.BurnSample{At: t0.Add(time.Duration(i) * 10 * time.Second), PeriodStart: per, Consumed: int64(i)}
			if err := s.RecordBurn(ctxT(t), e.res, smp, keep); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]int{"zadd": 13, "zremrangebyscore": 1, "pexpire": 1} // at 0 s (then every burnTrimEvery, 4 min)
		if !maps.Equal(hook.n, want) {
			t.Fatalf("commands %v; want %v", hook.n, want)
		}
		got, err := s.BurnSamples(ctxT(t), e.res, t0.Add(120*time.Second-keep))
		if err != nil || len(got) != 10 || got[0].Consumed != 3 || got[9].Consumed != 12 {
			t.Fatalf("samples within keep of the last: %+v, %v; want the 10 from 30 s on", got, err)
		}
		if ttl := e.rdb.PTTL(ctxT(t), burnKey(e.res)).Val(); ttl <= keep+burnTrimEvery || ttl > keep+burnTrimEvery+time.Minute {
			t.Fatalf("TTL %s; want within (keep+burnTrimEvery, keep+burnTrimEvery+1m]", ttl)
		}
		// A sample burnTrimEvery later trims: the 13 above are older than keep.
		smp := quota.BurnSample{At: t0.Add(burnTrimEvery), PeriodStart: per, Consumed: 13}
		if err := s.RecordBurn(ctxT(t), e.res, smp, keep); err != nil {
			t.Fatal(err)
		}
		if n := e.rdb.ZCard(ctxT(t), burnKey(e.res)).Val(); n != 1 || hook.n["zremrangebyscore"] != 2 {
			t.Fatalf("after a sample %s later: %d samples kept, %d trims; want 1 and 2", burnTrimEvery, n, hook.n["zremrangebyscore"])
		}
	})
}
