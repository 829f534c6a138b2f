package redisstore

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
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

// poolAttempt runs apply.lua for a critical apply of n on line made by
// the apply request attempt, in the store and in the world's model alike.
func (w *poolWorld) poolAttempt(t *testing.T, id, line string, n int64, attempt string) quota.ApplyResult {
	t.Helper()
	c := w.e.attemptCmd(id, n, w.per, attempt)
	c.Pools = &quota.PoolsCmd{Line: line, Critical: true, NoGrants: true}
	got, err := w.e.s.Apply(ctxT(t), c)
	if err != nil {
		t.Fatalf("pool apply %s/%s: %v", id, attempt, err)
	}
	if _, err := w.model.Apply(pools.ApplyReq{SessionID: id, Line: line, Amount: n, Critical: true, Now: w.now}); err != nil {
		t.Fatal(err)
	}
	return got
}

// A pools' apply answered 503 whose script ran (issue 11 §3.1, pools): its
// session carries the attempt like a plain apply's, so Compensate gives
// its grant back to the balance and to the pools it drew from, once, and
// leaves alone a session a retry has replayed since. Before the pools' apply
// kept the attempt, nothing was given back until the sweeper's grace.
func TestCompensateGivesBackAPoolsAttemptsOwnReservation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		a := w.names[0]
		w.poolAttempt(t, "kept", a, 100, "K")
		// 2000 from a: its dedicated part, then shared.
		if got := w.poolAttempt(t, "late", a, 2000, "A"); got.Outcome != quota.ApplyGranted || got.Drawn.Shared == 0 {
			t.Fatalf("late: %+v, want a grant drawing on shared", got)
		}
		for i, want := range []quota.CompensateOutcome{quota.CompensateGivenBack, quota.CompensateNotItsOwn} {
			if out := compensate(t, e, "late", "A"); out != want {
				t.Fatalf("compensation %d: %v, want %v", i+1, out, want)
			}
			if i == 0 {
				w.model.Cancel("late")
			}
			w.check(t, i)
			wantBalance(t, e.balance(t, w.per), 10_000, 0, 100)
		}
		// A retry that replayed the session before the compensation came.
		w.poolAttempt(t, "raced", a, 50, "C")
		if got := w.poolAttempt(t, "raced", a, 50, "D"); got.Outcome != quota.ApplyReplayed {
			t.Fatalf("retry: %+v, want a replay", got)
		}
		if out := compensate(t, e, "raced", "C"); out != quota.CompensateNotItsOwn {
			t.Fatalf("compensation after a retry replayed the session: %v, want left alone", out)
		}
		w.check(t, 2)
		wantBalance(t, e.balance(t, w.per), 10_000, 0, 150)
	})
}

// A pools' reservation made in a balance rebuilt since without it (the
// failover repair drops the balance, and with it the period's pool
// counters; both are rebuilt from a ledger where the refused apply has no
// row) is given back from neither: the rebuilt reserved and pool counters
// never counted it. Before the epoch check covered the pool counters,
// cancel.lua took its split from the rebuilt counters.
func TestAPoolsGiveBackTakesNothingFromCountersRebuiltWithoutTheSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		a := w.names[0]
		held := w.poolAttempt(t, "held", a, 300, "H") // its row is USING
		w.poolAttempt(t, "refused", a, 2000, "A")     // no ledger row
		before, err := e.s.PoolModel(ctx, e.res, w.per, w.lay)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.s.DropBalance(ctx, e.res, w.per, quota.Fence{}); err != nil {
			t.Fatal(err)
		}
		row := quota.UsageRecord{ResourceName: e.res, SessionID: "held", ClientID: "client-1", ApplyAmount: 300,
			GrantedAmount: 300, ChargedAmount: 300, StartTime: time.Now(), PeriodStart: w.per.Start, Status: quota.StatusUsing,
			BusinessLine: a, Drawn: held.Drawn}
		if _, err := e.s.Seed(ctx, e.res, w.per, 10_000, quota.PeriodTotals{Reserved: 300}, []quota.UsageRecord{row}, time.Minute); err != nil {
			t.Fatal(err)
		}
		ledger := pools.Totals{Open: []pools.OpenDraw{{SessionID: "held", Line: a, Drawn: held.Drawn.Drawn()}}}
		if ok, err := e.s.SeedPools(ctx, e.res, w.per, ledger); err != nil || !ok {
			t.Fatalf("SeedPools: %v %v", ok, err)
		}
		if out := compensate(t, e, "refused", "A"); out != quota.CompensateGivenBack {
			t.Fatalf("compensation: %v", out)
		}
		wantBalance(t, e.balance(t, w.per), 10_000, 0, 300)
		after, err := e.s.PoolModel(ctx, e.res, w.per, w.lay)
		if err != nil {
			t.Fatal(err)
		}
		if l := after.Lines[a]; l.UsedDedicated != held.Drawn.Dedicated || l.UsedShared != held.Drawn.Shared || after.SharedUsed != held.Drawn.Shared {
			t.Fatalf("line %s after the give-back: dedicated %d shared %d (pool %d); want the held session's %+v (before the rebuild: %+v)",
				a, l.UsedDedicated, l.UsedShared, after.SharedUsed, held.Drawn, *before.Lines[a])
		}
		// The session the rebuild counted gives its split back as before.
		if err := e.s.Cancel(ctx, e.res, "held"); err != nil {
			t.Fatal(err)
		}
		wantBalance(t, e.balance(t, w.per), 10_000, 0, 0)
		if after, err = e.s.PoolModel(ctx, e.res, w.per, w.lay); err != nil {
			t.Fatal(err)
		}
		if l := after.Lines[a]; l.UsedDedicated != 0 || l.UsedShared != 0 || after.SharedUsed != 0 {
			t.Fatalf("line %s after the held session's give-back: %+v, shared pool %d; want nothing held", a, *l, after.SharedUsed)
		}
	})
}

// The catch-up after a rebuild (issue 11, G7) counts a pools' session the
// rebuild's snapshot missed (its row landed just after): its reservation
// was made in the balance before the rebuild, so it carries that epoch
// (apply.lua), and seed.lua's catch-up mode adds its grant to
// 'reserved' once, however often it runs; the pool counters, rebuilt by
// pool_seed.lua from a later read that saw the row, are left alone; its
// finish then takes the grant back out of the balance that now counts it.
// Before the pools' apply kept the epoch, the catch-up could not tell such a
// session from one the balance counts, and left 'reserved' short by it.
func TestTheCatchUpCountsAPoolsSessionTheRebuildMissed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		a := w.names[0]
		late := w.poolAttempt(t, "late", a, 300, "L")
		if err := e.s.DropBalance(ctx, e.res, w.per, quota.Fence{}); err != nil {
			t.Fatal(err)
		}
		e.seed(t, w.per, 10_000, quota.PeriodTotals{}) // the snapshot: no row of it yet
		ledger := pools.Totals{Open: []pools.OpenDraw{{SessionID: "late", Line: a, Drawn: late.Drawn.Drawn()}}}
		if ok, err := e.s.SeedPools(ctx, e.res, w.per, ledger); err != nil || !ok { // read after it landed
			t.Fatalf("SeedPools: %v %v", ok, err)
		}
		w.check(t, 0)
		row := quota.UsageRecord{ResourceName: e.res, SessionID: "late", ClientID: "client-1", ApplyAmount: 300,
			GrantedAmount: 300, ChargedAmount: 300, StartTime: time.Now(), PeriodStart: w.per.Start, Status: quota.StatusUsing,
			BusinessLine: a, Drawn: late.Drawn}
		for range 2 {
			if err := e.s.CatchUp(ctx, quota.Fence{}, e.res, w.per, []quota.UsageRecord{row}, time.Minute); err != nil {
				t.Fatal(err)
			}
			wantBalance(t, e.balance(t, w.per), 10_000, 0, 300)
			w.check(t, 1)
		}
		if _, err := w.model.Finish("late", 100); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "late", 100)
		wantBalance(t, e.balance(t, w.per), 10_000, 100, 0)
		w.check(t, 2)
	})
}
