package redisstore

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// attemptCmd is e.cmd made by the apply request attempt.
func (e *env) attemptCmd(id string, amount int64, per quota.Period, attempt string) quota.ApplyCmd {
	c := e.cmd(id, amount, 0, per)
	c.Attempt = attempt
	return c
}

func compensate(tb testing.TB, e *env, id, attempt string) quota.CompensateOutcome {
	tb.Helper()
	out, err := e.s.Compensate(ctxT(tb), e.res, id, attempt)
	if err != nil {
		tb.Fatalf("Compensate %s/%s: %v", id, attempt, err)
	}
	return out
}

// Compensate (issue 11 §3.1) gives back exactly the reservation of the
// attempt that made it, once, and nothing a retry of the same session has
// replayed since: the retry may be writing its ledger row.
func TestCompensateGivesBackOnlyTheAttemptsOwnReservation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		if out := compensate(t, e, "late", "A"); out != quota.CompensateAbsent {
			t.Fatalf("before the attempt's script ran: %v, want absent", out)
		}
		// The refused attempt's script runs late (Redis resumed).
		e.grant(t, e.attemptCmd("late", 30, per, "A"), 30)
		for i, want := range []quota.CompensateOutcome{quota.CompensateGivenBack, quota.CompensateNotItsOwn} {
			if out := compensate(t, e, "late", "A"); out != want {
				t.Fatalf("compensation %d: %v, want %v", i+1, out, want)
			}
			wantBalance(t, e.balance(t, per), 100, 0, 0)
		}
		if st := e.session(t, "late")["status"]; st != "CANCELLED" {
			t.Fatalf("compensated session status %q, want a CANCELLED tombstone", st)
		}
		// A retry of the same apply after the compensation starts afresh:
		// counted once.
		e.grant(t, e.attemptCmd("late", 30, per, "B"), 30)
		wantBalance(t, e.balance(t, per), 100, 0, 30)

		// A retry that replayed the session before the compensation came:
		// the retry answers 200 on it, so it stays reserved.
		e.grant(t, e.attemptCmd("raced", 20, per, "C"), 20)
		if r := e.apply(t, e.attemptCmd("raced", 20, per, "D")); r.Outcome != quota.ApplyReplayed {
			t.Fatalf("retry: outcome %d, want a replay", r.Outcome)
		}
		// go-redis resending the first attempt's script, after the retry,
		// does not make the session that attempt's again.
		if r := e.apply(t, e.attemptCmd("raced", 20, per, "C")); r.Outcome != quota.ApplyReplayed {
			t.Fatalf("resend: outcome %d, want a replay", r.Outcome)
		}
		if out := compensate(t, e, "raced", "C"); out != quota.CompensateNotItsOwn {
			t.Fatalf("compensation after a retry replayed the session: %v, want left alone", out)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 50)
		if st := e.session(t, "raced")["status"]; st != "USING" {
			t.Fatalf("replayed session status %q, want USING", st)
		}
		// A resend of the attempt's own script (same token) keeps it its own.
		e.grant(t, e.attemptCmd("own", 10, per, "E"), 10)
		e.apply(t, e.attemptCmd("own", 10, per, "E"))
		if out := compensate(t, e, "own", "E"); out != quota.CompensateGivenBack {
			t.Fatalf("compensation after the attempt's own resend: %v, want given back", out)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 50)
		// A finished session is never compensated.
		e.grant(t, e.attemptCmd("done", 5, per, "F"), 5)
		e.finish(t, "done", 5)
		if out := compensate(t, e, "done", "F"); out != quota.CompensateNotItsOwn {
			t.Fatalf("compensation of a finished session: %v", out)
		}
		wantBalance(t, e.balance(t, per), 100, 5, 50)
	})
}

// A reservation made in a balance that was rebuilt since without it (the
// repair after a Redis failover drops the balance and seeds it from the
// ledger, where the refused apply has no row) is not in the rebuilt
// balance: giving it back must take nothing from it. Before the balance
// epochs, cancel.lua subtracted the grant from the rebuilt balance, which
// then under-counted by it.
func TestAGiveBackTakesNothingFromABalanceRebuiltWithoutTheSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		e.grant(t, e.attemptCmd("refused", 30, per, "A"), 30) // no ledger row
		e.grant(t, e.attemptCmd("orphan", 7, per, "B"), 7)    // no ledger row either
		e.grant(t, e.attemptCmd("held", 20, per, "C"), 20)    // its row is USING
		row := quota.UsageRecord{ResourceName: e.res, SessionID: "held", ClientID: "client-1", ApplyAmount: 20,
			GrantedAmount: 20, ChargedAmount: 20, StartTime: time.Now(), PeriodStart: per.Start, Status: quota.StatusUsing}
		if err := e.s.DropBalance(ctx, e.res, per, quota.Fence{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Seed(ctx, e.res, per, 100, quota.PeriodTotals{Reserved: 20}, []quota.UsageRecord{row}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if out := compensate(t, e, "refused", "A"); out != quota.CompensateGivenBack {
			t.Fatalf("compensation: %v", out)
		}
		if err := e.s.Cancel(ctx, e.res, "orphan"); err != nil { // the sweeper's give-back of an orphan
			t.Fatal(err)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 20)
		// The session the rebuild counted (its row is open) is given back
		// from it as before.
		if err := e.s.Cancel(ctx, e.res, "held"); err != nil {
			t.Fatal(err)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 0)
	})
}
