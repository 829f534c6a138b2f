package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestLockIsExclusiveAndIdempotentForItsHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		token, err := e.s.TryLock(ctx, e.res, "seed:1", time.Minute)
		if err != nil || token == "" {
			t.Fatalf("first lock: %q, %v", token, err)
		}
		if other, err := e.s.TryLock(ctx, e.res, "seed:1", time.Minute); err != nil || other != "" {
			t.Fatalf("second holder got %q, %v; want refused", other, err)
		}
		// go-redis resends a script call after a timeout: the resend carries
		// the same token and must find the lock its own.
		n, err := lockScript.Run(ctx, e.rdb, []string{prefix(e.res) + "lock:seed:1"}, token, 60000).Int64()
		if err != nil || n != 1 {
			t.Fatalf("resent lock call: %d, %v; want 1", n, err)
		}
		if err := e.s.Unlock(ctx, e.res, "seed:1", "not-the-token"); err != nil {
			t.Fatal(err)
		}
		if again, _ := e.s.TryLock(ctx, e.res, "seed:1", time.Minute); again != "" {
			t.Fatal("a wrong token released the lock")
		}
		if err := e.s.Unlock(ctx, e.res, "seed:1", token); err != nil {
			t.Fatal(err)
		}
		if again, err := e.s.TryLock(ctx, e.res, "seed:1", time.Minute); err != nil || again == "" {
			t.Fatalf("lock after release: %q, %v", again, err)
		}
	})
}

// RenewLock (issue 11 §3.4) extends its holder's lock to a new TTL from
// now, takes it again if it expired and is free, and reports false, changing
// nothing, when another holder has it.
func TestRenewLockExtendsOnlyItsHoldersLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		key := prefix(e.res) + "lock:reconcile"
		token, err := e.s.TryLock(ctx, e.res, "reconcile", 2*time.Second)
		if err != nil || token == "" {
			t.Fatalf("lock: %q, %v", token, err)
		}
		if held, err := e.s.RenewLock(ctx, e.res, "reconcile", token, time.Hour); err != nil || !held {
			t.Fatalf("renew by the holder: %v, %v", held, err)
		}
		if ttl := e.rdb.PTTL(ctx, key).Val(); ttl < 30*time.Minute {
			t.Fatalf("TTL after renewal %v, want about an hour", ttl)
		}
		if held, err := e.s.RenewLock(ctx, e.res, "reconcile", "someone-else", time.Millisecond); err != nil || held {
			t.Fatalf("renew by another token: %v, %v; want false", held, err)
		}
		if v := e.rdb.Get(ctx, key).Val(); v != token || e.rdb.PTTL(ctx, key).Val() < 30*time.Minute {
			t.Fatalf("another token's renewal changed the lock: %q", v)
		}
		e.rdb.Del(ctx, key) // expired
		if held, err := e.s.RenewLock(ctx, e.res, "reconcile", token, time.Minute); err != nil || !held || e.rdb.Get(ctx, key).Val() != token {
			t.Fatalf("renew of an expired, free lock: %v, %v", held, err)
		}
	})
}

func TestFinishThatWouldOverflowThePeriodIsRefusedBeforeAnyWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("big", 10, 0, per), 10)
		// Earlier overages have pushed the period's usage near the top.
		if err := e.rdb.HIncrBy(ctxT(t), balanceKey(e.res, per.ID()), "charged", 8_999_999_999_999_999_000).Err(); err != nil {
			t.Fatal(err)
		}
		before := e.balance(t, per)
		_, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "big", Actual: quota.MaxAmount, Retention: time.Hour})
		var ve *quota.ValidationError
		if !errors.As(err, &ve) || ve.Field != "actualUsedAmount" {
			t.Fatalf("finish past the counter: %v, want a ValidationError on actualUsedAmount", err)
		}
		if after := e.balance(t, per); after != before {
			t.Fatalf("a refused finish changed the balance: %+v → %+v", before, after)
		}
		// The session is still open and finishes with a sane amount.
		if f := e.finish(t, "big", 3); f.Charged != 3 || f.Refunded != 7 {
			t.Fatalf("finish after the refusal: %+v", f)
		}
	})
}
