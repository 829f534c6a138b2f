package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestFinishRefundsIntoTheSessionsOwnPeriod(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		p1 := e.current(t)
		p2 := quota.Period{Start: p1.End, End: p1.End.Add(time.Hour)}
		e.seed(t, p1, 100, quota.PeriodTotals{})
		e.seed(t, p2, 100, quota.PeriodTotals{Charged: 3, Reserved: 4})
		a := e.grant(t, e.cmd("s", 40, 0, p1), 40)

		f := e.finish(t, "s", 15)
		want := quota.FinishResult{
			ClientID: "client-1", Granted: 40, Charged: 15, Refunded: 25, Remaining: 85,
			PeriodStart: p1.Start, StartTime: a.StartTime, EndTime: f.EndTime,
		}
		if f != want {
			t.Fatalf("finish = %+v, want %+v", f, want)
		}
		if f.EndTime.Before(a.StartTime) {
			t.Fatalf("EndTime %v before StartTime %v", f.EndTime, a.StartTime)
		}
		wantBalance(t, e.balance(t, p1), 100, 15, 0)
		wantBalance(t, e.balance(t, p2), 100, 3, 4)
		if b := e.balance(t, p1); b.ActiveSessions != 0 {
			t.Fatalf("active sessions %d after finish, want 0", b.ActiveSessions)
		}
		if n, _ := e.rdb.ZCard(ctxT(t), leasesKey(e.res)).Result(); n != 0 {
			t.Fatalf("leases has %d members after finish", n)
		}
		ttl, _ := e.rdb.PTTL(ctxT(t), sessionKey(e.res, "s")).Result()
		if ttl <= 0 || ttl > time.Hour {
			t.Fatalf("finished session PTTL = %v, want within (0, 1h] (retention)", ttl)
		}
	})
}

func TestFinishOverageChargesTheExcess(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{Charged: 10})
		e.grant(t, e.cmd("s", 80, 0, per), 80)
		f := e.finish(t, "s", 130)
		if f.Charged != 130 || f.Overage != 50 || f.Refunded != 0 || f.Remaining != -40 {
			t.Fatalf("finish %+v, want charged 130 overage 50 remaining -40", f)
		}
		b := e.balance(t, per)
		wantBalance(t, b, 100, 140, 0)
		if b.Remaining() != -40 {
			t.Fatalf("Remaining() = %d, want -40", b.Remaining())
		}
		if r := e.apply(t, e.cmd("s2", 1, 1, per)); r.Outcome != quota.ApplyExhausted || r.Remaining != -40 {
			t.Fatalf("apply after overage: %+v, want exhausted with remaining -40", r)
		}
	})
}

func TestFinishRepeatReturnsTheFirstResultAndChargesOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("s", 50, 0, per), 50)
		first := e.finish(t, "s", 20)
		e.grant(t, e.cmd("later", 5, 0, per), 5) // the balance moves on
		again := e.finish(t, "s", 20)
		if !again.Replayed || first.Replayed {
			t.Fatalf("Replayed: first %v, repeat %v; want false, true", first.Replayed, again.Replayed)
		}
		again.Replayed = false
		if again != first {
			t.Fatalf("repeat = %+v, want the first result %+v", again, first)
		}
		wantBalance(t, e.balance(t, per), 100, 20, 5)
	})
}

func TestFinishConcurrentRepeatsRefundOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const n = 20
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("s", 60, 0, per), 60)
		results := make([]quota.FinishResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = e.s.Finish(ctxT(t), quota.FinishCmd{
					ResourceName: e.res, SessionID: "s", Actual: 25, Retention: time.Hour,
				})
			}()
		}
		wg.Wait()
		fresh := 0
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("finish %d: %v", i, errs[i])
			}
			if !r.Replayed {
				fresh++
			}
			if r.Refunded != 35 || r.Charged != 25 || r.Remaining != 75 || !r.EndTime.Equal(results[0].EndTime) {
				t.Fatalf("finish %d: %+v differs from %+v", i, r, results[0])
			}
		}
		if fresh != 1 {
			t.Fatalf("%d finishes were not replays, want 1", fresh)
		}
		wantBalance(t, e.balance(t, per), 100, 25, 0)
	})
}

func TestFinishRepeatWithAnotherActualConflicts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("s", 50, 0, per), 50)
		e.finish(t, "s", 20)
		_, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "s", Actual: 21, Retention: time.Hour})
		if !errors.Is(err, quota.ErrSessionConflict) {
			t.Fatalf("err = %v, want ErrSessionConflict", err)
		}
		wantBalance(t, e.balance(t, per), 100, 20, 0)
	})
}

func TestHeartbeatExtendsTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		c := e.cmd("s", 10, 0, per)
		c.Lease = time.Minute
		a := e.grant(t, c, 10)
		before := e.now(t)
		exp, err := e.s.Heartbeat(ctxT(t), e.res, "s", "", 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !exp.After(a.LeaseExpiresAt) || exp.Before(before.Add(10*time.Minute)) || exp.After(e.now(t).Add(10*time.Minute)) {
			t.Fatalf("new lease %v, want store now + 10m (old lease %v)", exp, a.LeaseExpiresAt)
		}
		score, err := e.rdb.ZScore(ctxT(t), leasesKey(e.res), "s").Result()
		if err != nil || int64(score) != exp.UnixMilli() {
			t.Fatalf("leases score %v, %v; want %d", score, err, exp.UnixMilli())
		}
		if got := e.session(t, "s")["lease"]; got != fmt.Sprint(exp.UnixMilli()) {
			t.Fatalf("session lease %s, want %d", got, exp.UnixMilli())
		}
	})
}

func TestHeartbeatOnASettledSessionIsNotActive(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("done", 10, 0, per), 10)
		e.finish(t, "done", 10)
		c := e.cmd("leak", 10, 0, per)
		c.Lease = time.Millisecond
		e.grant(t, c, 10)
		e.waitSwept(t, "leak")

		for id, st := range map[string]quota.Status{"done": quota.StatusFinished, "leak": quota.StatusLeaked} {
			_, err := e.s.Heartbeat(ctxT(t), e.res, id, "", time.Minute)
			var na *quota.NotActiveError
			if !errors.As(err, &na) || na.Status != st || na.SessionID != id || !errors.Is(err, quota.ErrSessionNotActive) {
				t.Fatalf("heartbeat %s: err = %v, want *NotActiveError with status %s", id, err, st)
			}
		}
		if n, _ := e.rdb.ZCard(ctxT(t), leasesKey(e.res)).Result(); n != 0 {
			t.Fatalf("a heartbeat re-leased a settled session (%d leases)", n)
		}
	})
}

func TestMissingSessionIsNotFound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		if _, err := e.s.Heartbeat(ctxT(t), e.res, "nope", "", time.Minute); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("heartbeat: err = %v, want ErrSessionNotFound", err)
		}
		if _, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "nope", Actual: 1, Retention: time.Hour}); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("finish: err = %v, want ErrSessionNotFound", err)
		}
		if err := e.s.Cancel(ctxT(t), e.res, "nope"); err != nil {
			t.Fatalf("cancel of a missing session: %v, want nil (no-op)", err)
		}
		if keys, _ := scanKeys(ctxT(t), e.rdb, prefix(e.res)+"*"); len(keys) != 0 {
			t.Fatalf("lookups of a missing session wrote %v", keys)
		}
	})
}

func TestCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("keep", 20, 0, per), 20)
		e.grant(t, e.cmd("c", 30, 0, per), 30)

		for range 2 { // cancelling twice gives back once
			if err := e.s.Cancel(ctxT(t), e.res, "c"); err != nil {
				t.Fatal(err)
			}
			wantBalance(t, e.balance(t, per), 100, 0, 20)
		}
		// A tombstone stays (for reconciliation), out of the lease index.
		if st, _ := e.rdb.HGet(ctxT(t), sessionKey(e.res, "c"), "status").Result(); st != "CANCELLED" {
			t.Fatalf("cancelled session status %q, want a CANCELLED tombstone", st)
		}
		if ttl, _ := e.rdb.PTTL(ctxT(t), sessionKey(e.res, "c")).Result(); ttl <= 0 {
			t.Fatalf("tombstone without an expiry: %v", ttl)
		}
		if _, err := e.rdb.ZScore(ctxT(t), leasesKey(e.res), "c").Result(); err == nil {
			t.Fatal("cancelled session still leased")
		}
		if _, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "c", Actual: 1, Retention: time.Hour}); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("finish of a cancelled session: %v, want not found", err)
		}
		// A retry of the apply with the same id starts afresh.
		e.grant(t, e.cmd("c", 30, 0, per), 30)
		wantBalance(t, e.balance(t, per), 100, 0, 50)
		if err := e.s.Cancel(ctxT(t), e.res, "c"); err != nil {
			t.Fatal(err)
		}

		// A finished session is left as it is.
		e.finish(t, "keep", 5)
		if err := e.s.Cancel(ctxT(t), e.res, "keep"); err != nil {
			t.Fatal(err)
		}
		wantBalance(t, e.balance(t, per), 100, 5, 0)
		if f := e.finish(t, "keep", 5); !f.Replayed {
			t.Fatalf("finish replay after cancel of a finished session: %+v", f)
		}
		// So is a leaked one (its grant stays charged).
		c := e.cmd("leak", 10, 0, per)
		c.Lease = time.Millisecond
		e.grant(t, c, 10)
		e.waitSwept(t, "leak")
		if err := e.s.Cancel(ctxT(t), e.res, "leak"); err != nil {
			t.Fatal(err)
		}
		wantBalance(t, e.balance(t, per), 100, 15, 0)
		// A cancelled id may be applied again.
		e.grant(t, e.cmd("c", 30, 0, per), 30)
	})
}

func TestKeysAreHashTaggedByResource(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.cmd("a", 10, 0, per), 10)
		c := e.cmd("b", 10, 0, per)
		c.Lease = time.Millisecond
		e.grant(t, c, 10)
		if _, err := e.s.Heartbeat(ctxT(t), e.res, "a", "", time.Minute); err != nil {
			t.Fatal(err)
		}
		e.waitSwept(t, "b")
		e.grant(t, e.cmd("c", 10, 0, per), 10)
		e.finish(t, "c", 1)

		keys, err := scanKeys(ctxT(t), e.rdb, "*"+e.res+"*")
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(keys)
		want := []string{
			"qc:{" + e.res + "}:b:" + fmt.Sprint(per.ID()),
			"qc:{" + e.res + "}:leaked",
			"qc:{" + e.res + "}:leases",
			"qc:{" + e.res + "}:limit",
			"qc:{" + e.res + "}:s:a",
			"qc:{" + e.res + "}:s:b",
			"qc:{" + e.res + "}:s:c",
		}
		if fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("keys %v, want %v", keys, want)
		}
	})
}

// TestAdjustIsAppliedOnceWhenResent closes known gap G8 (issue 11): a drift
// correction whose reply was lost is sent again by go-redis with the same
// arguments; adjust.lua applied it twice. With the call's token it is
// applied once and the resend reports it as applied.
func TestAdjustIsAppliedOnceWhenResent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		per := e.current(t)
		e.seed(t, per, 1000, quota.PeriodTotals{Charged: 100, Reserved: 50})
		keys := []string{balanceKey(e.res, per.ID()), adjustKey(e.res, "resent-token"), lockKey(e.res, "")}
		for i := range 2 { // the call, then go-redis's resend of it
			v, err := adjustScript.Run(ctx, e.rdb, keys, "-7", "3", "60000", "", "", "", itoa(per.ID())).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := []adjustCode{adjustApplied, adjustRepeated}[i]; v.(int64) != int64(want) {
				t.Fatalf("send %d: adjust.lua = %v, want %d", i+1, v, want)
			}
		}
		if b := e.balance(t, per); b.Charged != 93 || b.Reserved != 53 {
			t.Fatalf("balance charged %d reserved %d after a resent correction, want 93 and 53", b.Charged, b.Reserved)
		}
		// Separate calls are separate corrections.
		for range 2 {
			if out, err := e.s.Adjust(ctx, e.res, per, quota.Adjustment{Charged: 1}, quota.Fence{}); err != nil || out != quota.AdjustApplied {
				t.Fatalf("Adjust = %v, %v", out, err)
			}
		}
		if b := e.balance(t, per); b.Charged != 95 {
			t.Fatalf("charged %d after two more corrections of +1, want 95", b.Charged)
		}
	})
}
