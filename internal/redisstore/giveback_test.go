package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// expire ends session id's lease (its hash and the lease index), so that
// the next sweep takes it.
func (e *env) expire(tb testing.TB, id string) {
	tb.Helper()
	ctx := ctxT(tb)
	if err := e.rdb.HSet(ctx, sessionKey(e.res, id), "lease", "1").Err(); err != nil {
		tb.Fatal(err)
	}
	if err := e.rdb.ZAddXX(ctx, leasesKey(e.res), redis.Z{Score: 1, Member: id}).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Issue 22 §1: a drift correction keeps the reservation a live session
// still holds (the session's own give-back takes it, once), is never
// applied on a balance other than the one it was measured on (a give-back
// since, or the same correction sent again after a lost answer), and never
// leaves the balance below zero.
func TestAdjustKeepsALiveSessionsReservationForItsOwnGiveBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		per := e.current(t)
		e.seed(t, per, 1000, quota.PeriodTotals{Charged: 10})
		e.grant(t, e.cmd("leftover", 335, 0, per), 335) // no ledger row: drift 335
		seen := e.balance(t, per)
		fix := quota.Adjustment{Reserved: -335, Seen: seen, Unrecorded: []string{"other", "leftover"}}
		if out, err := e.s.Adjust(ctx, e.res, per, fix, quota.Fence{}); err != nil || out != quota.AdjustHeld {
			t.Fatalf("a drift that is a live session's reservation: %v %v, want held (nothing to correct)", out, err)
		}
		wantBalance(t, e.balance(t, per), 1000, 10, 335)
		// The rest of a drift is corrected, the live reservation kept.
		up := quota.Adjustment{Charged: 5, Reserved: -335, Seen: seen, Unrecorded: []string{"leftover"}}
		if out, err := e.s.Adjust(ctx, e.res, per, up, quota.Fence{}); err != nil || out != quota.AdjustApplied {
			t.Fatalf("charged corrected, the live reservation kept: %v %v, want applied", out, err)
		}
		// The same correction again, measured on the balance before it:
		// the balance moved, nothing changes (a resend under another token).
		if out, err := e.s.Adjust(ctx, e.res, per, up, quota.Fence{}); err != nil || out != quota.AdjustMoved {
			t.Fatalf("a correction of a balance that moved: %v %v, want moved", out, err)
		}
		wantBalance(t, e.balance(t, per), 1000, 15, 335)

		// The session's own give-back takes it, once; a correction measured
		// before it is refused (moved), and one that would go below zero is
		// an error.
		if err := e.s.Cancel(ctx, e.res, "leftover"); err != nil {
			t.Fatal(err)
		}
		fix.Seen = e.balance(t, per)
		if _, err := e.s.Adjust(ctx, e.res, per, quota.Adjustment{Reserved: -335, Seen: seen}, quota.Fence{}); err != nil {
			t.Fatal(err)
		}
		out, err := e.s.Adjust(ctx, e.res, per, fix, quota.Fence{})
		if !errors.Is(err, quota.ErrNegativeBalance) || errors.Is(err, quota.ErrUnavailable) || out != 0 {
			t.Fatalf("a correction below zero: %v %v, want quota.ErrNegativeBalance", out, err)
		}
		wantBalance(t, e.balance(t, per), 1000, 15, 0)

		// A live session that this balance does not count (reserved in a
		// balance rebuilt since, another epoch) holds nothing in it.
		e.rdb.HSet(ctx, balanceKey(e.res, per.ID()), "ep", "rebuilt")
		e.grant(t, e.cmd("counted", 40, 0, per), 40)
		e.rdb.HSet(ctx, sessionKey(e.res, "counted"), "bep", "before")
		fix = quota.Adjustment{Reserved: -40, Seen: e.balance(t, per), Unrecorded: []string{"counted"}}
		if out, err := e.s.Adjust(ctx, e.res, per, fix, quota.Fence{}); err != nil || out != quota.AdjustApplied {
			t.Fatalf("a correction past a session another balance counts: %v %v, want applied", out, err)
		}
		wantBalance(t, e.balance(t, per), 1000, 15, 0)
	})
}

// Issue 22 §1: no give-back leaves reserved or charged below zero. A
// balance that no longer holds a session's reservation (it was taken
// twice) refuses the session's finish, cancel and sweep, and an uncharge
// of more than was charged, with quota.ErrNegativeBalance and nothing
// changed (session and balance alike); reconciliation then corrects the
// balance upward and the give-back goes through.
func TestNoGiveBackLeavesTheBalanceBelowZero(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		per := e.current(t)
		e.seed(t, per, 1000, quota.PeriodTotals{})
		for _, id := range []string{"finished", "cancelled", "swept"} {
			e.grant(t, e.cmd(id, 100, 0, per), 100)
		}
		bkey := balanceKey(e.res, per.ID())
		e.rdb.HSet(ctx, bkey, "reserved", "50") // 250 given back already: a double give-back
		e.expire(t, "swept")
		refused := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, quota.ErrNegativeBalance) || errors.Is(err, quota.ErrUnavailable) {
				t.Fatalf("%s: %v, want quota.ErrNegativeBalance", what, err)
			}
			wantBalance(t, e.balance(t, per), 1000, 0, 50)
			for _, id := range []string{"finished", "cancelled", "swept"} {
				if st := e.session(t, id)["status"]; st != "USING" {
					t.Fatalf("%s: session %s is %s, want it left USING", what, id, st)
				}
			}
		}
		_, err := e.s.Finish(ctx, quota.FinishCmd{ResourceName: e.res, SessionID: "finished", Actual: 20, Retention: time.Hour})
		refused("finish", err)
		refused("cancel", e.s.Cancel(ctx, e.res, "cancelled"))
		_, err = e.s.Sweep(ctx, e.res, 10, time.Hour)
		refused("sweep", err)
		refused("uncharge", e.s.Uncharge(ctx, e.res, per, 1))

		// Reconciliation's correction up (the three sessions' 300 against 50).
		fix := quota.Adjustment{Reserved: 250, Seen: e.balance(t, per)}
		if out, err := e.s.Adjust(ctx, e.res, per, fix, quota.Fence{}); err != nil || out != quota.AdjustApplied {
			t.Fatalf("correction up: %v %v", out, err)
		}
		e.finish(t, "finished", 20)
		if err := e.s.Cancel(ctx, e.res, "cancelled"); err != nil {
			t.Fatal(err)
		}
		if l := e.sweep(t, 10); len(l) != 1 || l[0].SessionID != "swept" {
			t.Fatalf("sweep: %+v", l)
		}
		wantBalance(t, e.balance(t, per), 1000, 120, 0)
	})
}
