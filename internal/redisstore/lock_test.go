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

// TestAStaleLockHoldersWritesAreRefused (issue 11 §3.4, fencing): a holder
// whose lock expired while it worked (cut off from Redis past the TTL) and
// was taken by another instance must not write what it computed under the
// lock: seed.lua and adjust.lua check, in the same step as the write, that
// the lock still holds the caller's token. Before the fence, the stale
// seeder's balance and the stale reconciler's correction were written.
func TestAStaleLockHoldersWritesAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		per := e.current(t)
		seedLock := "seed:" + itoa(per.ID())
		stale, fresh := e.lostLock(t, seedLock) // its TTL ran out while it read the ledger
		open := []quota.UsageRecord{{ResourceName: e.res, SessionID: "s1", ApplyAmount: 5, GrantedAmount: 5,
			ChargedAmount: 5, StartTime: time.Now(), PeriodStart: per.Start, Status: quota.StatusUsing}}
		wrote, err := e.s.SeedFenced(ctx, quota.Fence{Name: seedLock, Token: stale}, e.res, per, 1000,
			quota.PeriodTotals{Charged: 10, Reserved: 5}, open, time.Minute)
		if !errors.Is(err, quota.ErrLockLost) || wrote {
			t.Fatalf("stale seeder: wrote %v, %v; want quota.ErrLockLost", wrote, err)
		}
		if b := e.balance(t, per); b.Exists {
			t.Fatalf("the stale seeder wrote the balance: %+v", b)
		}
		if n := e.rdb.Exists(ctx, sessionKey(e.res, "s1")).Val(); n != 0 {
			t.Fatal("the stale seeder restored a session")
		}
		wrote, err = e.s.SeedFenced(ctx, quota.Fence{Name: seedLock, Token: fresh}, e.res, per, 1000,
			quota.PeriodTotals{Charged: 20, Reserved: 5}, open, time.Minute)
		if err != nil || !wrote {
			t.Fatalf("the holder's seed: %v, %v", wrote, err)
		}

		rec, err := e.s.TryLock(ctx, e.res, "reconcile", time.Minute)
		if err != nil || rec == "" {
			t.Fatalf("reconcile lock: %q, %v", rec, err)
		}
		e.rdb.Set(ctx, lockKey(e.res, "reconcile"), "the-next-reconciler", time.Minute)
		out, err := e.s.Adjust(ctx, e.res, per, quota.Adjustment{Charged: -7}, quota.Fence{Name: "reconcile", Token: rec})
		if !errors.Is(err, quota.ErrLockLost) || out != 0 {
			t.Fatalf("stale reconciler's correction: %v, %v; want quota.ErrLockLost", out, err)
		}
		if b := e.balance(t, per); b.Charged != 20 || b.Reserved != 5 {
			t.Fatalf("balance after a refused correction: %+v, want charged 20 reserved 5", b)
		}
		out, err = e.s.Adjust(ctx, e.res, per, quota.Adjustment{Charged: -7}, quota.Fence{Name: "reconcile", Token: "the-next-reconciler"})
		if err != nil || out != quota.AdjustApplied {
			t.Fatalf("the holder's correction: %v, %v", out, err)
		}
		if b := e.balance(t, per); b.Charged != 13 {
			t.Fatalf("charged %d after the holder's correction, want 13", b.Charged)
		}
	})
}

// TestAStaleWatchersDropIsRefused (issue 11 §3.4, fencing): the failover
// watcher drops a period's balance under the period's seed lock; if its
// lock expired before the drop ran (the watcher cut off past the TTL) and
// a seeder took it and wrote a fresh balance from the ledger, drop.lua
// refuses the drop and that balance stays. Before the fence (a plain DEL)
// the fresh balance was dropped under the new holder.
func TestAStaleWatchersDropIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		per := e.current(t)
		seedLock := "seed:" + itoa(per.ID())
		stale, fresh := e.lostLock(t, seedLock) // the watcher's TTL ran out
		if wrote, err := e.s.SeedFenced(ctx, quota.Fence{Name: seedLock, Token: fresh}, e.res, per, 1000,
			quota.PeriodTotals{Charged: 30, Reserved: 5}, nil, time.Minute); err != nil || !wrote {
			t.Fatalf("the seeder's balance: %v, %v", wrote, err)
		}
		err := e.s.DropBalance(ctx, e.res, per, quota.Fence{Name: seedLock, Token: stale})
		if !errors.Is(err, quota.ErrLockLost) {
			t.Fatalf("stale watcher's drop: %v; want quota.ErrLockLost", err)
		}
		if b := e.balance(t, per); !b.Exists || b.Charged != 30 || b.Reserved != 5 {
			t.Fatalf("balance after a refused drop: %+v; want the seeder's (charged 30, reserved 5)", b)
		}
		if err := e.s.DropBalance(ctx, e.res, per, quota.Fence{Name: seedLock, Token: fresh}); err != nil {
			t.Fatalf("the holder's drop: %v", err)
		}
		if b := e.balance(t, per); b.Exists {
			t.Fatalf("balance after the holder's drop: %+v; want none", b)
		}
		if err := e.s.DropBalance(ctx, e.res, per, quota.Fence{Name: seedLock, Token: fresh}); err != nil {
			t.Fatalf("dropping an absent balance: %v; want nil", err)
		}
	})
}

// lostLock takes the named lock of e's resource, lets it expire (deleted,
// as its TTL running out would) and has the next holder take it: the stale
// holder's token and the new holder's.
func (e *env) lostLock(t *testing.T, name string) (stale, fresh string) {
	t.Helper()
	ctx := ctxT(t)
	stale, err := e.s.TryLock(ctx, e.res, name, time.Minute)
	if err != nil || stale == "" {
		t.Fatalf("lock: %q, %v", stale, err)
	}
	e.rdb.Del(ctx, lockKey(e.res, name))
	fresh, err = e.s.TryLock(ctx, e.res, name, time.Minute)
	if err != nil || fresh == "" {
		t.Fatalf("the next holder's lock: %q, %v", fresh, err)
	}
	return stale, fresh
}
