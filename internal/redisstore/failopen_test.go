package redisstore

import (
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// failopen.lua keeps the split a pools' session drew at apply (open
// finding B): a finish overwrites the session's dd..gl with what it stays
// charged to, and Sessions still answers the draw at apply. A plain
// session keeps none.
func TestAFailOpenSessionKeepsItsDrawAfterItsFinish(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 1000, pools.DefaultSettings(), []pools.LineSpec{
			{Name: "a", Tier: pools.TierCore, Weight: 1}, {Name: "b", Tier: pools.TierCore, Weight: 1}})
		_, res := w.apply(t, pools.ApplyReq{SessionID: "fo", Line: "a", Amount: 400, Critical: true, Now: w.now})
		if res.Outcome != quota.ApplyGranted || res.Drawn.Shared == 0 {
			t.Fatalf("apply: %+v; want a grant from the line's dedicated and shared parts", res)
		}
		if err := e.s.MarkFailOpen(ctxT(t), e.res, "fo"); err != nil {
			t.Fatal(err)
		}
		e.finish(t, "fo", 100)
		st, err := e.s.Sessions(ctxT(t), e.res, []string{"fo"})
		if err != nil {
			t.Fatal(err)
		}
		got := st["fo"]
		if !got.FailOpen || got.BusinessLine != "a" || got.FailOpenDrawn == nil || *got.FailOpenDrawn != res.Drawn {
			t.Fatalf("session %+v (draw %+v); want fail-open on line a with the apply's draw %+v", got, got.FailOpenDrawn, res.Drawn)
		}
		if s := e.session(t, "fo"); s["ds"] == itoa(res.Drawn.Shared) {
			t.Fatalf("the finish left ds %s: the test proves nothing", s["ds"])
		}
		plain := e.cmd("plain", 10, 0, w.per)
		plain.Pools = &quota.PoolsCmd{Line: "b", Critical: true}
		e.grant(t, plain, 10)
		if err := e.s.MarkFailOpen(ctxT(t), e.res, "plain"); err != nil {
			t.Fatal(err)
		}
		if st, err := e.s.Sessions(ctxT(t), e.res, []string{"plain"}); err != nil || st["plain"].FailOpenDrawn == nil ||
			st["plain"].FailOpenDrawn.Dedicated != 10 {
			t.Fatalf("session on line b: %+v, %v; want its draw kept", st["plain"], err)
		}
	})
}

// ScopeFailOpen (open finding A) moves a flagged session of its client
// from the bare id to the scoped one, its lease and flag with it, and
// leaves alone a session not flagged, another client's, or one whose
// scoped id a live session holds.
func TestScopeFailOpenMovesTheSessionWithItsLeaseAndFlag(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 1000, quota.PeriodTotals{})
		c := e.cmd("x", 10, 0, per)
		c.ClientID = "c1"
		e.grant(t, c, 10)
		scoped := quota.ScopedSessionID(e.res, "c1", "x")
		move := func(client string) bool {
			t.Helper()
			ok, err := e.s.ScopeFailOpen(ctxT(t), e.res, "x", scoped, client)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if move("c1") {
			t.Fatal("a session not flagged was moved")
		}
		if err := e.s.MarkFailOpen(ctxT(t), e.res, "x"); err != nil {
			t.Fatal(err)
		}
		if move("c2") {
			t.Fatal("another client's session was moved")
		}
		lease, _ := e.rdb.ZScore(ctxT(t), leasesKey(e.res), "x").Result()
		if !move("c1") {
			t.Fatal("the flagged session was not moved")
		}
		if n, _ := e.rdb.Exists(ctxT(t), sessionKey(e.res, "x")).Result(); n != 0 {
			t.Fatal("the bare session is still there")
		}
		if s := e.session(t, scoped); s["fo"] != "1" || s["client"] != "c1" || s["granted"] != "10" {
			t.Fatalf("scoped session %v", s)
		}
		if got, err := e.rdb.ZScore(ctxT(t), leasesKey(e.res), scoped).Result(); err != nil || got != lease {
			t.Fatalf("scoped lease %v, %v; want %v", got, err, lease)
		}
		if ids, err := e.s.FailOpenSessions(ctxT(t), e.res); err != nil || len(ids) != 1 || ids[0] != scoped {
			t.Fatalf("fail-open ids %v, %v; want only the scoped id", ids, err)
		}
		if _, err := e.s.Heartbeat(ctxT(t), e.res, scoped, "c1", time.Minute); err != nil {
			t.Fatalf("heartbeat under the scoped id: %v", err)
		}
		// Flagged again under the bare id, with the scoped id live: stays.
		e.grant(t, c, 10)
		if err := e.s.MarkFailOpen(ctxT(t), e.res, "x"); err != nil {
			t.Fatal(err)
		}
		if move("c1") {
			t.Fatal("moved onto a live scoped session")
		}
		wantBalance(t, e.balance(t, per), 1000, 0, 20)
	})
}
