package redisstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestSeedWritesTheBalanceOnceAndTheLimitIfAbsent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		if b := e.balance(t, per); b.Exists || b.Limit != 0 {
			t.Fatalf("before seed: %+v, want no balance", b)
		}
		e.seed(t, per, 100, quota.PeriodTotals{Charged: 30, Reserved: 5})
		wantBalance(t, e.balance(t, per), 100, 30, 5)

		// A second seed (a concurrent seeder lost) changes nothing, not even
		// the limit, which is only written when absent.
		wrote, err := e.s.Seed(ctxT(t), e.res, per, 999, quota.PeriodTotals{Charged: 1}, nil, time.Minute)
		if err != nil || wrote {
			t.Fatalf("second Seed = %v, %v; want false, nil", wrote, err)
		}
		wantBalance(t, e.balance(t, per), 100, 30, 5)

		// Another period of the same resource shares the limit.
		next := quota.Period{Start: per.End, End: per.End.Add(time.Hour)}
		if b := e.balance(t, next); b.Exists || b.Limit != 100 {
			t.Fatalf("next period before seed: %+v, want not existing with limit 100", b)
		}
		e.seed(t, next, 7, quota.PeriodTotals{})
		wantBalance(t, e.balance(t, next), 100, 0, 0)
	})
}

func TestSeedExpiresAnEndingPeriodRetentionAfterItsEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.s.BalanceRetention = 2 * time.Hour
		per := e.current(t)
		e.seed(t, per, 10, quota.PeriodTotals{})
		ttl, err := e.rdb.PTTL(ctxT(t), balanceKey(e.res, per.ID())).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := per.End.Add(2 * time.Hour).Sub(e.now(t)) // ≈ 3h
		if d := ttl - want; d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("PTTL = %v, want ≈ %v (PEXPIREAT end+retention)", ttl, want)
		}

		never := quota.Period{Start: per.Start.Add(-24 * time.Hour)}
		e.seed(t, never, 10, quota.PeriodTotals{})
		if ttl, err := e.rdb.PTTL(ctxT(t), balanceKey(e.res, never.ID())).Result(); err != nil || ttl != -1 {
			t.Fatalf("PTTL of a never-ending period = %v, %v; want -1 (no expiry)", ttl, err)
		}
	})
}

func TestApplyGrantsAndReservesAfterSeed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{Charged: 10})
		before := e.now(t)
		r := e.grant(t, e.cmd("s1", 30, 0, per), 30)
		if r.Remaining != 60 || !r.PeriodStart.Equal(per.Start) {
			t.Fatalf("result %+v, want remaining 60 in period %v", r, per.Start)
		}
		after := e.now(t)
		if r.Now.Before(before) || r.Now.After(after) || !r.StartTime.Equal(r.Now) {
			t.Fatalf("Now %v / StartTime %v, want the store clock within [%v, %v]", r.Now, r.StartTime, before, after)
		}
		if !r.LeaseExpiresAt.Equal(r.Now.Add(10 * time.Minute)) {
			t.Fatalf("LeaseExpiresAt %v, want Now+10m = %v", r.LeaseExpiresAt, r.Now.Add(10*time.Minute))
		}
		e.grant(t, e.cmd("s2", 25, 0, per), 25)
		b := e.balance(t, per)
		wantBalance(t, b, 100, 10, 55)
		if b.ActiveSessions != 2 || b.Remaining() != 35 {
			t.Fatalf("active %d remaining %d, want 2 and 35", b.ActiveSessions, b.Remaining())
		}

		s := e.session(t, "s1")
		want := map[string]string{
			"amount": "30", "min": "0", "client": "client-1", "granted": "30", "remaining": "60",
			"status": "USING", "period": fmt.Sprint(per.ID()),
			"start": fmt.Sprint(r.StartTime.UnixMilli()), "lease": fmt.Sprint(r.LeaseExpiresAt.UnixMilli()),
		}
		for k, v := range want {
			if s[k] != v {
				t.Errorf("session field %s = %q, want %q (session %v)", k, s[k], v, s)
			}
		}
		score, err := e.rdb.ZScore(ctxT(t), leasesKey(e.res), "s1").Result()
		if err != nil || int64(score) != r.LeaseExpiresAt.UnixMilli() {
			t.Fatalf("leases score = %v, %v; want %d", score, err, r.LeaseExpiresAt.UnixMilli())
		}
	})
}

func TestApplyWhenExhaustedChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{Charged: 20})
		e.grant(t, e.cmd("s1", 70, 0, per), 70)
		before := e.balance(t, per)

		r := e.apply(t, e.cmd("s2", 11, 0, per))
		if r.Outcome != quota.ApplyExhausted || r.Granted != 0 || r.Remaining != 10 {
			t.Fatalf("result %+v, want exhausted with remaining 10", r)
		}
		if after := e.balance(t, per); after != before {
			t.Fatalf("balance changed by an exhausted apply: %+v -> %+v", before, after)
		}
		if n, _ := e.rdb.Exists(ctxT(t), sessionKey(e.res, "s2")).Result(); n != 0 {
			t.Fatal("an exhausted apply wrote a session")
		}
		// Nothing was remembered: the same id may apply again once it fits.
		e.grant(t, e.cmd("s2", 10, 0, per), 10)
	})
}

func TestApplyMinAmount(t *testing.T) {
	t.Parallel()
	// remaining is 40 in every case (limit 100, charged 60).
	cases := []struct {
		name        string
		amount, min int64
		outcome     quota.ApplyOutcome
		granted     int64
		remaining   int64
	}{
		{"grants the whole amount when it fits", 30, 10, quota.ApplyGranted, 30, 10},
		{"grants what remains when the remaining is above min", 50, 10, quota.ApplyGranted, 40, 0},
		{"grants what remains when the remaining equals min", 50, 40, quota.ApplyGranted, 40, 0},
		{"refuses when the remaining is below min", 50, 41, quota.ApplyExhausted, 0, 40},
		{"refuses when min is 0 (all or nothing)", 50, 0, quota.ApplyExhausted, 0, 40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				per := e.current(t)
				e.seed(t, per, 100, quota.PeriodTotals{Charged: 60})
				r := e.apply(t, e.cmd("s", c.amount, c.min, per))
				if r.Outcome != c.outcome || r.Granted != c.granted || r.Remaining != c.remaining {
					t.Fatalf("result %+v, want outcome %d granted %d remaining %d", r, c.outcome, c.granted, c.remaining)
				}
				wantBalance(t, e.balance(t, per), 100, 60, c.granted)
			})
		})
	}
}

func TestApplyNeedsBalance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		r := e.apply(t, e.cmd("s", 1, 0, per))
		if r.Outcome != quota.ApplyNeedBalance {
			t.Fatalf("before seed: outcome %d, want need balance (5)", r.Outcome)
		}
		e.seed(t, per, 100, quota.PeriodTotals{})
		// The limit key is lost (evicted, deleted by hand): seed again.
		if err := e.rdb.Del(ctxT(t), limitKey(e.res)).Err(); err != nil {
			t.Fatal(err)
		}
		if r := e.apply(t, e.cmd("s", 1, 0, per)); r.Outcome != quota.ApplyNeedBalance {
			t.Fatalf("without limit key: outcome %d, want need balance (5)", r.Outcome)
		}
		if n, _ := e.rdb.Exists(ctxT(t), sessionKey(e.res, "s")).Result(); n != 0 {
			t.Fatal("a need-balance apply wrote a session")
		}
		if b := e.balance(t, per); b.Exists || b.Limit != 0 {
			t.Fatalf("balance without limit key = %+v, want not existing", b)
		}
		if raw, _ := e.rdb.HGetAll(ctxT(t), balanceKey(e.res, per.ID())).Result(); raw["charged"] != "0" || raw["reserved"] != "0" {
			t.Fatalf("raw balance %v changed by a need-balance apply", raw)
		}
		if err := e.s.SetLimit(ctxT(t), e.res, 100); err != nil {
			t.Fatal(err)
		}
		e.grant(t, e.cmd("s", 1, 0, per), 1)
	})
}

func TestApplyInTheWrongPeriod(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		per   func(now time.Time) quota.Period
		first bool
		want  quota.ApplyOutcome
	}{
		{"refuses a period that ended", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)}
		}, false, quota.ApplyWrongPeriod},
		{"refuses a period that ends now", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(-2 * time.Hour), End: now}
		}, false, quota.ApplyWrongPeriod},
		{"refuses a first period that ended", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)}
		}, true, quota.ApplyWrongPeriod},
		{"refuses a period that starts in the future", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(2 * time.Second), End: now.Add(time.Hour)}
		}, false, quota.ApplyWrongPeriod},
		{"accepts a first period that starts slightly in the future", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(2 * time.Second), End: now.Add(time.Hour)}
		}, true, quota.ApplyGranted},
		{"accepts a never-ending first period that starts in the future", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(2 * time.Second)}
		}, true, quota.ApplyGranted},
		{"accepts a never-ending period", func(now time.Time) quota.Period {
			return quota.Period{Start: now.Add(-time.Hour)}
		}, false, quota.ApplyGranted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				per := c.per(e.now(t))
				e.seed(t, per, 100, quota.PeriodTotals{})
				cmd := e.cmd("s", 10, 0, per)
				cmd.FirstPeriod = c.first
				before := e.now(t)
				r := e.apply(t, cmd)
				if r.Outcome != c.want {
					t.Fatalf("outcome %d, want %d (result %+v)", r.Outcome, c.want, r)
				}
				if r.Now.Before(before) || r.Now.After(e.now(t)) {
					t.Fatalf("Now %v is not the store clock (>= %v)", r.Now, before)
				}
				reserved := int64(0)
				if c.want == quota.ApplyGranted {
					reserved = 10
					if !r.PeriodStart.Equal(per.Start) {
						t.Fatalf("PeriodStart %v, want %v", r.PeriodStart, per.Start)
					}
				}
				wantBalance(t, e.balance(t, per), 100, 0, reserved)
			})
		})
	}
}

func TestApplyReplayReturnsTheFirstAnswerAndReservesOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		first := e.grant(t, e.cmd("s", 60, 10, per), 60)
		e.grant(t, e.cmd("other", 30, 0, per), 30)
		again := e.apply(t, e.cmd("s", 60, 10, per))
		if again.Outcome != quota.ApplyReplayed {
			t.Fatalf("replay outcome %d, want replayed", again.Outcome)
		}
		again.Outcome, again.Now = first.Outcome, first.Now
		if again != first {
			t.Fatalf("replay = %+v, want the first answer %+v", again, first)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 90)

		// Still a replay once finished (the id stays taken).
		e.finish(t, "s", 5)
		if r := e.apply(t, e.cmd("s", 60, 10, per)); r.Outcome != quota.ApplyReplayed || r.Granted != 60 {
			t.Fatalf("replay after finish: %+v", r)
		}
		wantBalance(t, e.balance(t, per), 100, 5, 30)
	})
}

// A session Redis lost and seed restored from the ledger has no first
// answer's remaining: its replay answers the grant and the current
// remaining, never 0.
func TestApplyReplayOfARestoredSessionAnswersTheCurrentRemaining(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		now := e.now(t)
		open := []quota.UsageRecord{{
			ResourceName: e.res, SessionID: "restored", ClientID: "client-1", PeriodStart: per.Start,
			ApplyAmount: 30, GrantedAmount: 30, ChargedAmount: 30, StartTime: now, Status: quota.StatusUsing,
		}}
		if _, err := e.s.Seed(ctxT(t), e.res, per, 1000, quota.PeriodTotals{Charged: 200, Reserved: 30}, open, time.Minute); err != nil {
			t.Fatal(err)
		}
		r := e.apply(t, e.cmd("restored", 30, 0, per))
		if r.Outcome != quota.ApplyReplayed || r.Granted != 30 || r.Remaining != 1000-200-30 {
			t.Fatalf("replay of a restored session: %+v, want replayed, granted 30, remaining 770", r)
		}
		e.grant(t, e.cmd("next", 70, 0, per), 70)
		if r := e.apply(t, e.cmd("restored", 30, 0, per)); r.Remaining != 700 {
			t.Fatalf("second replay: remaining %d, want the current 700", r.Remaining)
		}
		wantBalance(t, e.balance(t, per), 1000, 200, 100)
	})
}

func TestApplyReplayWithOtherArgumentsConflicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(c *quota.ApplyCmd)
	}{
		{"another amount", func(c *quota.ApplyCmd) { c.Amount++ }},
		{"another min amount", func(c *quota.ApplyCmd) { c.MinAmount = 1 }},
		{"another client", func(c *quota.ApplyCmd) { c.ClientID = "client-2" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				per := e.current(t)
				e.seed(t, per, 100, quota.PeriodTotals{})
				cmd := e.cmd("s", 10, 0, per)
				e.grant(t, cmd, 10)
				c.change(&cmd)
				_, err := e.s.Apply(ctxT(t), cmd)
				if !errors.Is(err, quota.ErrSessionConflict) {
					t.Fatalf("err = %v, want ErrSessionConflict", err)
				}
				wantBalance(t, e.balance(t, per), 100, 0, 10)
			})
		})
	}
}

func TestApplyConcurrentDistinctSessionsGrantExactlyWhatFits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const n, amount, limit = 200, 7, 1000
		per := e.current(t)
		e.seed(t, per, limit, quota.PeriodTotals{})
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			granted, grants int64
			errs            []error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.s.Apply(ctxT(t), e.cmd(fmt.Sprintf("s%d", i), amount, 0, per))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case r.Outcome == quota.ApplyGranted:
					grants++
					granted += r.Granted
				case r.Outcome != quota.ApplyExhausted:
					errs = append(errs, fmt.Errorf("s%d: outcome %d", i, r.Outcome))
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d errors, first: %v", len(errs), errs[0])
		}
		if grants != limit/amount || granted != limit/amount*amount {
			t.Fatalf("%d grants of %d in all, want %d grants", grants, granted, limit/amount)
		}
		b := e.balance(t, per)
		wantBalance(t, b, limit, 0, granted)
		if b.ActiveSessions != grants {
			t.Fatalf("active sessions %d, want %d", b.ActiveSessions, grants)
		}
	})
}

func TestApplyConcurrentSameSessionReservesOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const n = 50
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		results := make([]quota.ApplyResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = e.s.Apply(ctxT(t), e.cmd("same", 40, 0, per))
			}()
		}
		wg.Wait()
		grantedOnce := 0
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("apply %d: %v", i, errs[i])
			}
			if r.Outcome == quota.ApplyGranted {
				grantedOnce++
			} else if r.Outcome != quota.ApplyReplayed {
				t.Fatalf("apply %d: outcome %d", i, r.Outcome)
			}
			if r.Granted != 40 || r.Remaining != 60 || !r.LeaseExpiresAt.Equal(results[0].LeaseExpiresAt) {
				t.Fatalf("apply %d: %+v differs from %+v", i, r, results[0])
			}
		}
		if grantedOnce != 1 {
			t.Fatalf("%d applies granted, want 1 (the others replayed)", grantedOnce)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 40)
	})
}

func TestSetLimitBelowUsageGivesNegativeRemainingAndRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{Charged: 20})
		e.grant(t, e.cmd("s1", 40, 0, per), 40)
		if err := e.s.SetLimit(ctxT(t), e.res, 50); err != nil {
			t.Fatal(err)
		}
		b := e.balance(t, per)
		wantBalance(t, b, 50, 20, 40)
		if b.Remaining() != -10 {
			t.Fatalf("Remaining() = %d, want -10", b.Remaining())
		}
		for _, c := range []quota.ApplyCmd{e.cmd("s2", 1, 0, per), e.cmd("s3", 5, 1, per)} {
			if r := e.apply(t, c); r.Outcome != quota.ApplyExhausted || r.Granted != 0 || r.Remaining != -10 {
				t.Fatalf("%s: %+v, want exhausted with remaining -10", c.SessionID, r)
			}
		}
		wantBalance(t, e.balance(t, per), 50, 20, 40)
		// Raising it again takes effect at once.
		if err := e.s.SetLimit(ctxT(t), e.res, 70); err != nil {
			t.Fatal(err)
		}
		e.grant(t, e.cmd("s4", 10, 0, per), 10)
	})
}

func TestAmountsNear2To53RoundTripExactly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const maxAmt = quota.MaxAmount // 2^53−1
		per := e.current(t)
		e.seed(t, per, maxAmt, quota.PeriodTotals{})
		r := e.grant(t, e.cmd("big", maxAmt-1, 0, per), maxAmt-1)
		if r.Remaining != 1 {
			t.Fatalf("remaining %d, want 1", r.Remaining)
		}
		wantBalance(t, e.balance(t, per), maxAmt, 0, maxAmt-1)
		raw, err := e.rdb.HGetAll(ctxT(t), balanceKey(e.res, per.ID())).Result()
		if err != nil || raw["reserved"] != "9007199254740990" {
			t.Fatalf("raw balance %v, %v; want reserved \"9007199254740990\"", raw, err)
		}
		if s := e.session(t, "big"); s["granted"] != "9007199254740990" || s["remaining"] != "1" {
			t.Fatalf("raw session %v", s)
		}
		if again := e.apply(t, e.cmd("big", maxAmt-1, 0, per)); again.Granted != maxAmt-1 || again.Remaining != 1 {
			t.Fatalf("replay %+v", again)
		}

		f := e.finish(t, "big", maxAmt)
		if f.Charged != maxAmt || f.Overage != 1 || f.Granted != maxAmt-1 || f.Remaining != 0 {
			t.Fatalf("finish %+v", f)
		}
		wantBalance(t, e.balance(t, per), maxAmt, maxAmt, 0)

		// A partial grant of a large remaining, and a refund back.
		per2 := quota.Period{Start: per.Start.Add(-24 * time.Hour)}
		e.seed(t, per2, maxAmt, quota.PeriodTotals{Charged: 3})
		e.grant(t, e.cmd("partial", maxAmt, 1, per2), maxAmt-3)
		f = e.finish(t, "partial", 1)
		if f.Refunded != maxAmt-4 || f.Remaining != maxAmt-4 {
			t.Fatalf("finish %+v, want refunded and remaining %d", f, maxAmt-4)
		}
		wantBalance(t, e.balance(t, per2), maxAmt, 4, 0)
	})
}
