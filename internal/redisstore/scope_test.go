package redisstore

import (
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// scopedCmd is c with its scoped id (quota scope.go) as the other form.
func scopedCmd(c quota.ApplyCmd, client string) quota.ApplyCmd {
	c.ClientID = client
	c.OtherSessionID = quota.ScopedSessionID(c.ResourceName, client, c.SessionID)
	return c
}

// applyScoped applies c and fails unless the outcome and the form (bare or
// scoped) are the ones wanted.
func (e *env) applyScoped(t *testing.T, c quota.ApplyCmd, want quota.ApplyOutcome, scoped bool) quota.ApplyResult {
	t.Helper()
	r, err := e.s.Apply(ctxT(t), c)
	if err != nil || r.Outcome != want || r.OtherForm != scoped {
		t.Fatalf("apply %s of %s: outcome %d scoped %v, %v; want outcome %d scoped %v",
			c.SessionID, c.ClientID, r.Outcome, r.OtherForm, err, want, scoped)
	}
	return r
}

// apply.lua (issue 11 §3.5): the bare id while no other client's session
// is there, the scoped one when another's is (also FINISHED) or when the
// scoped one holds the client's session; replays and conflicts are of the
// session chosen; a CANCELLED tombstone counts as no session.
func TestApplyChoosesTheBareOrTheScopedID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		a := scopedCmd(e.cmd("x", 10, 0, per), "client-a")
		b := scopedCmd(e.cmd("x", 20, 0, per), "client-b")
		e.applyScoped(t, a, quota.ApplyGranted, false)
		e.applyScoped(t, b, quota.ApplyGranted, true)
		e.applyScoped(t, a, quota.ApplyReplayed, false)
		if r := e.applyScoped(t, b, quota.ApplyReplayed, true); r.Granted != 20 {
			t.Fatalf("replay of b granted %d, want its own 20", r.Granted)
		}
		other := b
		other.Amount = 21
		if _, err := e.s.Apply(ctxT(t), other); !errors.Is(err, quota.ErrSessionConflict) {
			t.Fatalf("b with another amount: %v, want a conflict", err)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 30)
		if s := e.session(t, "x"); s["client"] != "client-a" || s["granted"] != "10" {
			t.Fatalf("bare session %v, want client-a's", s)
		}
		if s := e.session(t, b.OtherSessionID); s["client"] != "client-b" || s["granted"] != "20" {
			t.Fatalf("scoped session %v, want client-b's", s)
		}
		if n, err := e.rdb.ZCard(ctxT(t), leasesKey(e.res)).Result(); err != nil || n != 2 {
			t.Fatalf("leases %d, %v; want both sessions", n, err)
		}

		// A finished session of another client still holds the bare id.
		e.finish(t, "x", 10)
		c := scopedCmd(e.cmd("x", 5, 0, per), "client-c")
		e.applyScoped(t, c, quota.ApplyGranted, true)
		// The scoped session is the client's even with the bare id free
		// (its row is another's: the Service applied under the scoped id).
		if err := e.rdb.Del(ctxT(t), sessionKey(e.res, "x")).Err(); err != nil {
			t.Fatal(err)
		}
		e.applyScoped(t, b, quota.ApplyReplayed, true)
		// A CANCELLED tombstone is no session: the bare id is taken afresh.
		d := scopedCmd(e.cmd("y", 5, 0, per), "client-d")
		e.applyScoped(t, d, quota.ApplyGranted, false)
		if err := e.s.Cancel(ctxT(t), e.res, "y"); err != nil {
			t.Fatal(err)
		}
		e.applyScoped(t, scopedCmd(e.cmd("y", 7, 0, per), "client-e"), quota.ApplyGranted, false)
		// Without a scoped id (QC_GLOBAL_SESSION_IDS) another client's id
		// is a conflict, as before.
		g := e.cmd("y", 7, 0, per)
		g.ClientID = "client-f"
		if _, err := e.s.Apply(ctxT(t), g); !errors.Is(err, quota.ErrSessionConflict) {
			t.Fatalf("global id of another client: %v, want a conflict", err)
		}
	})
}

// A pools' apply chooses as a plain one does (the same apply.lua).
func TestPoolApplyChoosesTheBareOrTheScopedID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		w := newPoolWorld(t, e, 10_000, pools.DefaultSettings(), pools.LineNames(2))
		line := w.names[0]
		apply := func(c quota.ApplyCmd, want quota.ApplyOutcome, scoped bool) quota.ApplyResult {
			t.Helper()
			c.Pools = &quota.PoolsCmd{Line: line, Critical: true, NoGrants: true}
			r, err := e.s.Apply(ctxT(t), c)
			if err != nil || r.Outcome != want || r.OtherForm != scoped {
				t.Fatalf("apply %s of %s: outcome %d scoped %v, %v; want outcome %d scoped %v",
					c.SessionID, c.ClientID, r.Outcome, r.OtherForm, err, want, scoped)
			}
			return r
		}
		a := scopedCmd(e.cmd("x", 10, 0, w.per), "client-a")
		b := scopedCmd(e.cmd("x", 20, 0, w.per), "client-b")
		apply(a, quota.ApplyGranted, false)
		apply(b, quota.ApplyGranted, true)
		apply(a, quota.ApplyReplayed, false)
		if r := apply(b, quota.ApplyReplayed, true); r.Granted != 20 {
			t.Fatalf("replay of b granted %d, want its own 20", r.Granted)
		}
		if s := e.session(t, b.OtherSessionID); s["client"] != "client-b" || s["line"] != line {
			t.Fatalf("scoped session %v, want client-b's on %s", s, line)
		}
	})
}
