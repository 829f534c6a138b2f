package redisstore

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// TestPoolSeedKeepsRefundsThatLandAfterTheLedgerRead: Redis loses a
// period's balance and pool counters; the rebuild reads the ledger (two
// sessions still USING there), then one of them finishes and the other is
// cancelled before the rebuild writes the counters (finish.lua and
// cancel.lua leave unseeded counters alone). The counters written must hold
// what the sessions hold now, as the model says: the finish's refund and
// the cancelled grant are not counted again.
func TestPoolSeedKeepsRefundsThatLandAfterTheLedgerRead(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(3))
		a, b, c := w.names[0], w.names[1], w.names[2]
		w.addGrant(t, pools.Grant{ID: "g1", Line: a, Amount: 500, EffectiveMs: w.now - 1000, ExpiresMs: w.now + 3_600_000})
		req := func(id, line string, n int64) pools.ApplyReq {
			return pools.ApplyReq{SessionID: id, Line: line, Amount: n, Now: w.now}
		}
		// c holds all but 1000 of the shared pool (a continuation, which may
		// take it all), used and finished; then a (non-critical): its
		// dedicated part, of the shared pool the larger of its borrowing
		// limit and half of what is free, then the grant.
		hog := w.model.Lines[c].OwnDedicated() + w.model.SharedCap() - 1000
		if d, _ := w.apply(t, pools.ApplyReq{SessionID: "hog", Line: c, Amount: hog, Continuation: true, Now: w.now}); d.Reason != "" {
			t.Fatalf("hog: %+v", d)
		}
		if _, err := w.model.Finish("hog", hog); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "hog", hog)
		for _, r := range []pools.ApplyReq{req("fill", a, 1200), req("done", b, 400), req("late-finish", a, 700),
			req("late-cancel", b, 300), req("open", a, 100)} {
			if d, _ := w.apply(t, r); d.Reason != "" {
				t.Fatalf("apply %+v refused: %s", r, d.Reason)
			}
		}
		if g := w.model.Sessions["late-finish"].Drawn; g.Shared == 0 || g.Grant == 0 {
			t.Fatalf("late-finish drew %+v: want shared and grant parts", g)
		}
		if _, err := w.model.Finish("done", 150); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "done", 150)
		w.check(t, 0)

		// The ledger as the rebuild reads it.
		read := pools.Totals{Settled: map[string]pools.Drawn{}}
		for id, s := range w.model.Sessions {
			if s.Finished {
				d := read.Settled[s.Line]
				d.Dedicated, d.Shared, d.Buffer, d.Grant = d.Dedicated+s.Drawn.Dedicated, d.Shared+s.Drawn.Shared, d.Buffer+s.Drawn.Buffer, d.Grant+s.Drawn.Grant
				read.Settled[s.Line] = d
				continue
			}
			read.Open = append(read.Open, pools.OpenDraw{SessionID: id, Line: s.Line, Drawn: s.Drawn})
		}
		if len(read.Open) != 4 {
			t.Fatalf("open in the ledger: %+v", read.Open)
		}

		// Redis loses the period's balance and counters; the balance comes
		// back (seed.lua), the pool counters not yet.
		if err := e.rdb.Del(ctxT(t), balanceKey(e.res, w.per.ID())).Err(); err != nil {
			t.Fatal(err)
		}
		e.seed(t, w.per, 10_000, quota.PeriodTotals{})

		// Between the ledger read and the counters' write.
		if _, err := w.model.Finish("late-finish", 400); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "late-finish", 400)
		w.model.Cancel("late-cancel")
		if err := e.s.Cancel(ctxT(t), e.res, "late-cancel"); err != nil {
			t.Fatal(err)
		}

		if ok, err := e.s.SeedPools(ctxT(t), e.res, w.per, read); err != nil || !ok {
			t.Fatalf("SeedPools: %v %v", ok, err)
		}
		w.check(t, 1)
		// Once seeded, a finish settles the counters itself.
		if _, err := w.model.Finish("open", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Finish(ctxT(t), quota.FinishCmd{ResourceName: e.res, SessionID: "open", Actual: 0, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		w.check(t, 2)
	})
}

// The layout's epoch stays while the layout is rewritten and changes when
// Redis lost it and it is written afresh: the controller's cue that the
// consumption counters started again (pools.Model.Epoch).
func TestPoolLayoutEpochChangesWhenRedisLostIt(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		epoch := func() string {
			t.Helper()
			m, err := e.s.PoolModel(ctxT(t), e.res, w.per, w.lay)
			if err != nil {
				t.Fatal(err)
			}
			return m.Epoch
		}
		first := epoch()
		if first == "" {
			t.Fatal("no epoch after the first layout")
		}
		if _, _, err := e.s.SetPoolLayout(ctxT(t), e.res, w.lay, nil); err != nil || epoch() != first {
			t.Fatalf("rewriting the layout changed the epoch %s → %s (%v)", first, epoch(), err)
		}
		if err := e.rdb.Del(ctxT(t), poolKey(e.res)).Err(); err != nil {
			t.Fatal(err)
		}
		if m := epoch(); m != "" {
			t.Fatalf("epoch %q of a lost layout", m)
		}
		if ok, _, err := e.s.SetPoolLayout(ctxT(t), e.res, w.lay, &pools.Moves{}); err != nil || !ok {
			t.Fatalf("relayout: %v %v", ok, err)
		}
		if again := epoch(); again == "" || again == first {
			t.Fatalf("epoch after the loss %q, before %q", again, first)
		}
	})
}

// The pools' hashes (the layout and a period's counters) are kept in
// Redis' hashtable encoding: as listpacks, every apply searched a dozen
// lines' fields linearly (real Redis only: miniredis has no encodings).
func TestPoolHashesAreHashtables(t *testing.T) {
	e := newEnv(t, "redis")
	w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
	for _, k := range []string{poolKey(e.res), balanceKey(e.res, w.per.ID())} {
		if enc, err := e.rdb.ObjectEncoding(ctxT(t), k).Result(); err != nil || enc != "hashtable" {
			t.Errorf("%s: encoding %q (%v), want hashtable", k, enc, err)
		}
	}
}

// TestGrantRestoreKeepsRefundsThatLandAfterTheLedgerRead: as for the pool
// counters, for the temporary grants' use: Redis loses the grants; the
// restore reads the ledger (two sessions holding part of a grant still
// USING there), then one finishes and the other is cancelled (their
// refunds land in a hash not yet restored), then the restore writes. The
// grant's use must be what the model says it is now.
func TestGrantRestoreKeepsRefundsThatLandAfterTheLedgerRead(t *testing.T) {
	forEachServer(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		a := w.names[0]
		g := pools.Grant{ID: "g1", Line: a, Amount: 3000, EffectiveMs: w.now - 1000, ExpiresMs: w.now + 3_600_000}
		w.addGrant(t, g)
		req := func(id string, n int64) pools.ApplyReq {
			return pools.ApplyReq{SessionID: id, Line: a, Amount: n, Critical: true, Continuation: true, Now: w.now}
		}
		// The other line holds the whole shared pool (a continuation, used
		// and finished); a: its dedicated part first, then the grant.
		b := w.names[1]
		hog := w.model.Lines[b].OwnDedicated() + w.model.SharedCap()
		if d, _ := w.apply(t, pools.ApplyReq{SessionID: "hog", Line: b, Amount: hog, Continuation: true, Now: w.now}); d.Reason != "" {
			t.Fatalf("hog: %+v", d)
		}
		if _, err := w.model.Finish("hog", hog); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "hog", hog)
		l := w.model.Lines[a]
		own := l.OwnDedicated()
		for _, r := range []pools.ApplyReq{req("fill", own), req("done", 500), req("late-finish", 800), req("late-cancel", 600), req("open", 300)} {
			if d, _ := w.apply(t, r); d.Reason != "" || (r.SessionID != "fill" && d.Drawn.Grant != r.Amount) {
				t.Fatalf("apply %+v: %+v", r, d)
			}
		}
		if _, err := w.model.Finish("done", 100); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "done", 100)
		w.check(t, 0)

		// The ledger as the restore reads it.
		read := pools.GrantUse{Settled: map[string]int64{}}
		for id, s := range w.model.Sessions {
			if len(s.Drawn.Grants) == 0 {
				continue
			}
			if s.Finished {
				for _, x := range s.Drawn.Grants {
					read.Settled[x.ID] += x.Amount
				}
				continue
			}
			read.Open = append(read.Open, pools.OpenDraw{SessionID: id, Line: s.Line, Drawn: s.Drawn})
		}
		if len(read.Open) != 3 {
			t.Fatalf("open in the ledger: %+v", read.Open)
		}
		if err := e.rdb.Del(ctxT(t), grantsKey(e.res)).Err(); err != nil {
			t.Fatal(err)
		}
		// Between the ledger read and the restore.
		if _, err := w.model.Finish("late-finish", 200); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "late-finish", 200)
		w.model.Cancel("late-cancel")
		if err := e.s.Cancel(ctxT(t), e.res, "late-cancel"); err != nil {
			t.Fatal(err)
		}
		gs := []pools.Grant{g}
		gs[0].Used = read.Settled[g.ID]
		if ok, err := e.s.RestoreGrants(ctxT(t), e.res, gs, read.Open); err != nil || !ok {
			t.Fatalf("RestoreGrants: %v %v", ok, err)
		}
		w.check(t, 1)
		if ok, err := e.s.RestoreGrants(ctxT(t), e.res, gs, nil); err != nil || ok {
			t.Fatalf("second restore wrote again: %v %v", ok, err)
		}
		w.check(t, 2)
	})
}
