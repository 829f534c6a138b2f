package redisstore

import (
	"errors"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The scripts rely on a few Lua and command behaviours; miniredis (gopher-lua)
// must show the same ones as Redis 7.0.
func TestLuaBehaviourTheScriptsRelyOn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		k := prefix(e.res)

		t.Run("TIME inside a script is the server clock in ms", func(t *testing.T) {
			sc := redis.NewScript(`local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`)
			before := time.Now().UnixMilli()
			got, err := sc.Run(ctx, e.rdb, []string{k + "x"}).Int64()
			after := time.Now().UnixMilli()
			if err != nil || got < before-1000 || got > after+1000 {
				t.Fatalf("TIME = %d, %v; want within [%d, %d] (±1s)", got, err, before, after)
			}
		})

		t.Run("string.format %d writes large and negative integers exactly", func(t *testing.T) {
			sc := redis.NewScript(`local out = {}
for i, a in ipairs(ARGV) do out[i] = string.format('%d', tonumber(a)) end
out[#out + 1] = string.format('%d', -tonumber(ARGV[1]))
out[#out + 1] = string.format('%d', tonumber(ARGV[1]) - 1)
return out`)
			got, err := sc.Run(ctx, e.rdb, []string{k + "x"}, "9007199254740991", "-9007199254740991", "0", "1780000000123").StringSlice()
			want := []string{"9007199254740991", "-9007199254740991", "0", "1780000000123", "-9007199254740991", "9007199254740990"}
			if err != nil || len(got) != len(want) {
				t.Fatalf("got %v, %v; want %v", got, err, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("got %v, want %v", got, want)
				}
			}
		})

		t.Run("HINCRBY takes formatted large numbers", func(t *testing.T) {
			sc := redis.NewScript(`redis.call('HINCRBY', KEYS[1], 'v', string.format('%d', tonumber(ARGV[1])))
redis.call('HINCRBY', KEYS[1], 'v', string.format('%d', -1))
return tonumber(redis.call('HGET', KEYS[1], 'v'))`)
			got, err := sc.Run(ctx, e.rdb, []string{k + "h"}, "9007199254740991").Int64()
			if err != nil || got != quota.MaxAmount-1 {
				t.Fatalf("got %d, %v; want %d", got, err, quota.MaxAmount-1)
			}
		})

		t.Run("a Lua number is returned as an exact integer", func(t *testing.T) {
			got, err := redis.NewScript(`return {tonumber(ARGV[1]), 1780000000123 + 600000}`).
				Run(ctx, e.rdb, []string{k + "x"}, "9007199254740991").Int64Slice()
			if err != nil || len(got) != 2 || got[0] != quota.MaxAmount || got[1] != 1780000600123 {
				t.Fatalf("got %v, %v", got, err)
			}
		})

		t.Run("a number argument to redis.call is written as an integer", func(t *testing.T) {
			sc := redis.NewScript(`redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + 600000, 'm')
redis.call('HSET', KEYS[2], 'n', tonumber(ARGV[1]) + 1)
return {redis.call('ZSCORE', KEYS[1], 'm'), redis.call('HGET', KEYS[2], 'n')}`)
			got, err := sc.Run(ctx, e.rdb, []string{k + "z", k + "h2"}, "1780000000123").StringSlice()
			if err != nil || len(got) != 2 || got[0] != "1780000600123" || got[1] != "1780000000124" {
				t.Fatalf("got %v, %v", got, err)
			}
		})

		t.Run("missing hash fields read as false", func(t *testing.T) {
			got, err := redis.NewScript(`local s = redis.call('HMGET', KEYS[1], 'a', 'b')
local g = redis.call('GET', KEYS[1] .. 'nokey')
return {type(s[1]), tostring(s[1] == false), type(g), g or 'dflt'}`).Run(ctx, e.rdb, []string{k + "nohash"}).StringSlice()
			want := []string{"boolean", "true", "boolean", "dflt"}
			if err != nil || len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
				t.Fatalf("got %v, %v; want %v", got, err, want)
			}
		})

		t.Run("SRANDMEMBER with a count returns distinct members", func(t *testing.T) {
			if err := e.rdb.SAdd(ctx, k+"set", "a", "b", "c", "d", "e").Err(); err != nil {
				t.Fatal(err)
			}
			sc := redis.NewScript(`return redis.call('SRANDMEMBER', KEYS[1], ARGV[1])`)
			for _, c := range []struct{ count, want int }{{3, 3}, {5, 5}, {100, 5}, {0, 0}} {
				got, err := sc.Run(ctx, e.rdb, []string{k + "set"}, c.count).StringSlice()
				seen := map[string]bool{}
				for _, m := range got {
					seen[m] = true
				}
				if err != nil || len(got) != c.want || len(seen) != c.want {
					t.Fatalf("count %d: %v, %v; want %d distinct", c.count, got, err, c.want)
				}
			}
			got, err := sc.Run(ctx, e.rdb, []string{k + "noset"}, 10).StringSlice()
			if err != nil || len(got) != 0 {
				t.Fatalf("missing set: %v, %v; want empty", got, err)
			}
		})

		t.Run("ZRANGEBYSCORE with LIMIT inside a script", func(t *testing.T) {
			if err := e.rdb.ZAdd(ctx, k+"zr", redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"},
				redis.Z{Score: 3, Member: "c"}).Err(); err != nil {
				t.Fatal(err)
			}
			got, err := redis.NewScript(`return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))`).
				Run(ctx, e.rdb, []string{k + "zr"}, "2", "5").StringSlice()
			if err != nil || len(got) != 2 || got[0] != "a" || got[1] != "b" {
				t.Fatalf("got %v, %v; want [a b]", got, err)
			}
		})

		t.Run("PEXPIREAT and PEXPIRE inside a script", func(t *testing.T) {
			at := time.Now().Add(time.Hour).UnixMilli()
			sc := redis.NewScript(`redis.call('SET', KEYS[1], 'v')
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'v')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}`)
			got, err := sc.Run(ctx, e.rdb, []string{k + "ex1", k + "ex2"}, strconv.FormatInt(at, 10), "120000").Int64Slice()
			if err != nil || len(got) != 2 {
				t.Fatalf("got %v, %v", got, err)
			}
			if d := time.Duration(got[0]) * time.Millisecond; d < 59*time.Minute || d > time.Hour {
				t.Fatalf("PTTL after PEXPIREAT in 1h = %v", d)
			}
			if d := time.Duration(got[1]) * time.Millisecond; d < 110*time.Second || d > 2*time.Minute {
				t.Fatalf("PTTL after PEXPIRE 2m = %v", d)
			}
		})
	})
}

func TestScriptFlushBetweenCallsReloadsTheScripts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("s1", 10, 0, per), 10)
		if err := e.rdb.ScriptFlush(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.rdb.ScriptExists(ctxT(t), applyScript.Hash()).Result(); err != nil || ok[0] {
			t.Fatalf("SCRIPT EXISTS after flush = %v, %v; want false", ok, err)
		}
		e.grant(t, e.cmd("s2", 10, 0, per), 10)
		if err := e.rdb.ScriptFlush(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Heartbeat(ctxT(t), e.res, "s2", "", time.Minute); err != nil {
			t.Fatal(err)
		}
		e.rdb.ScriptFlush(ctxT(t))
		e.finish(t, "s1", 4)
		e.rdb.ScriptFlush(ctxT(t))
		if err := e.s.Cancel(ctxT(t), e.res, "s2"); err != nil {
			t.Fatal(err)
		}
		e.rdb.ScriptFlush(ctxT(t))
		e.sweep(t, 10)
		e.rdb.ScriptFlush(ctxT(t))
		wantBalance(t, e.balance(t, per), 100, 4, 0)
	})
}

// unavailable runs every Store method and checks that each fails with
// quota.ErrUnavailable.
func unavailable(t *testing.T, s *Store) {
	t.Helper()
	ctx := ctxT(t)
	per := quota.Period{Start: time.Now().Add(-time.Hour)}
	calls := map[string]func() error{
		"apply": func() error {
			_, err := s.Apply(ctx, quota.ApplyCmd{ResourceName: "r", SessionID: "s", Amount: 1, Period: per, Lease: time.Minute})
			return err
		},
		"cancel":    func() error { return s.Cancel(ctx, "r", "s") },
		"heartbeat": func() error { _, err := s.Heartbeat(ctx, "r", "s", "", time.Minute); return err },
		"finish": func() error {
			_, err := s.Finish(ctx, quota.FinishCmd{ResourceName: "r", SessionID: "s", Actual: 1, Retention: time.Hour})
			return err
		},
		"balance":   func() error { _, err := s.Balance(ctx, "r", per); return err },
		"seed":      func() error { _, err := s.Seed(ctx, "r", per, 1, quota.PeriodTotals{}, nil, time.Minute); return err },
		"set limit": func() error { return s.SetLimit(ctx, "r", 1) },
		"sweep":     func() error { _, err := s.Sweep(ctx, "r", 1, time.Hour); return err },
		"ack leaks": func() error { return s.AckLeaks(ctx, "r", []string{"s"}) },
	}
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := calls[n](); !errors.Is(err, quota.ErrUnavailable) {
			t.Errorf("%s: err = %v, want ErrUnavailable", n, err)
		}
	}
}

func TestAClosedClientIsUnavailable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		rdb := e.sameClient(t)
		if err := rdb.Ping(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		_ = rdb.Close()
		unavailable(t, New(rdb))
		ps := NewPipelined(rdb, testPipelining)
		defer ps.Close()
		unavailable(t, ps)
	})
}

func TestAClosedPipelinedStoreIsUnavailable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		s := NewPipelined(e.rdb, testPipelining)
		s.Close()
		s.Close() // twice is fine
		per := e.current(t)
		_, err := s.Apply(ctxT(t), e.cmd("s1", 1, 0, per))
		if !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("apply on a closed store: err = %v, want ErrUnavailable", err)
		}
	})
}

func TestAnUnreachableServerIsUnavailable(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
	})
	defer rdb.Close()
	unavailable(t, New(rdb))
	ps := NewPipelined(rdb, testPipelining)
	defer ps.Close()
	unavailable(t, ps)
}

// On miniredis TIME follows SetTime (FastForward only moves TTLs), so a
// lease can be expired without waiting.
func TestSweepFollowsTheMiniredisClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "miniredis")
	start := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	e.mr.SetTime(start)
	if got := e.now(t); !got.Equal(start) {
		t.Fatalf("TIME = %v after SetTime(%v)", got, start)
	}
	per := quota.Period{Start: start.Add(-time.Hour), End: start.Add(time.Hour)}
	e.seed(t, per, 100, quota.PeriodTotals{})
	a := e.grant(t, e.cmd("s", 30, 0, per), 30) // 10-minute lease
	if !a.LeaseExpiresAt.Equal(start.Add(10 * time.Minute)) {
		t.Fatalf("lease %v, want %v", a.LeaseExpiresAt, start.Add(10*time.Minute))
	}
	e.mr.SetTime(start.Add(10*time.Minute - time.Millisecond))
	if got := e.sweep(t, 10); len(got) != 0 {
		t.Fatalf("swept %+v a millisecond before the lease ends", got)
	}
	e.mr.SetTime(start.Add(10 * time.Minute)) // lease <= now: expired
	got := e.sweep(t, 10)
	if len(got) != 1 || !got[0].Fresh || !got[0].EndTime.Equal(start.Add(10*time.Minute)) {
		t.Fatalf("sweep %+v, want s swept at the lease end", got)
	}
	wantBalance(t, e.balance(t, per), 100, 30, 0)

	// The leaked session expires after its retention (1h); an unacknowledged
	// leak whose session is gone is dropped from the leaked set.
	e.mr.FastForward(time.Hour + time.Second)
	if got := e.sweep(t, 10); len(got) != 0 {
		t.Fatalf("sweep after the leaked session expired: %+v", got)
	}
	if n, _ := e.rdb.SCard(ctxT(t), leakedKey(e.res)).Result(); n != 0 {
		t.Fatalf("leaked set still has %d members", n)
	}

	// Apply in a period that ended on the store's clock.
	e.mr.SetTime(per.End)
	r := e.apply(t, e.cmd("late", 1, 0, per))
	if r.Outcome != quota.ApplyWrongPeriod || !r.Now.Equal(per.End) {
		t.Fatalf("apply at the period end: %+v, want wrong period with Now %v", r, per.End)
	}
}
