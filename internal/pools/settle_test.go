package pools

import (
	"errors"
	"testing"
)

// A repeated finish answers the first settlement; another actual amount
// is a conflict; an unknown session is an error. Nothing moves twice.
func TestFinishRepeatsAndConflicts(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "1", Line: "a", Amount: 250, Critical: true})
	first, err := m.Finish("1", 220)
	if err != nil || first.Refunded != 30 || first.Overage != 0 || first.Charged.Dedicated != 200 || first.Charged.Shared != 20 {
		t.Fatalf("first finish %+v, %v; want 30 back from shared", first, err)
	}
	used := m.Lines["a"].Used()
	again, err := m.Finish("1", 220)
	if err != nil || again.Refunded != first.Refunded || again.Charged.Total() != first.Charged.Total() || m.Lines["a"].Used() != used {
		t.Fatalf("repeat %+v, %v (used %d → %d)", again, err, used, m.Lines["a"].Used())
	}
	if _, err := m.Finish("1", 221); !errors.Is(err, ErrConflict) {
		t.Fatalf("another actual: %v", err)
	}
	if _, err := m.Finish("nope", 1); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("unknown: %v", err)
	}
	if err := m.Sweep("nope"); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("sweep unknown: %v", err)
	}
	if err := m.Sweep("1"); err != nil || m.Sessions["1"].Leaked {
		t.Fatalf("sweeping a finished session changed it: %v", err)
	}
}

// An overage is charged to the line's dedicated part, or to the limit on a
// resource without lines; a repeat reports the same overage.
func TestOverageGoesToTheDedicatedPartOrTheLimit(t *testing.T) {
	lay, _ := Plan(100, DefaultSettings(), nil)
	m := NewModel(lay, false)
	mustApply(t, m, ApplyReq{SessionID: "p", Amount: 10})
	out, err := m.Finish("p", 15)
	if err != nil || out.Overage != 5 || out.Refunded != 0 || out.Charged.Base != 15 || m.BaseUsed != 15 {
		t.Fatalf("plain overage %+v, %v; base used %d", out, err, m.BaseUsed)
	}
	if again, _ := m.Finish("p", 15); again.Overage != 5 || again.Refunded != 0 {
		t.Fatalf("repeat %+v", again)
	}
	mustApply(t, m, ApplyReq{SessionID: "q", Amount: 10})
	if out, _ := m.Finish("q", 4); out.Refunded != 6 || out.Charged.Base != 4 || m.BaseUsed != 19 {
		t.Fatalf("plain refund %+v, base used %d", out, m.BaseUsed)
	}
	ml := twoLines(t, false)
	mustApply(t, ml, ApplyReq{SessionID: "1", Line: "b", Amount: 120, Critical: true}) // 100 dedicated + 20 shared
	out, _ = ml.Finish("1", 130)
	if out.Overage != 10 || out.Charged.Dedicated != 110 || out.Charged.Shared != 20 || ml.Lines["b"].UsedDedicated != 110 {
		t.Fatalf("line overage %+v, b %+v", out, ml.Lines["b"])
	}
	if s := Settle(Drawn{Shared: 5}, 5, 5, true); s.Shared != 5 || s.Total() != 5 {
		t.Fatalf("exact use settles the draw as it was: %+v", s)
	}
}

// A refund leaves the pools in the reverse of the draw order: grants
// (latest drawn first), buffer, shared, dedicated.
func TestSettleRefundsInReverseDrawOrder(t *testing.T) {
	d := Drawn{Dedicated: 10, Shared: 10, Buffer: 10, Grant: 10, Grants: []GrantDraw{{ID: "g1", Amount: 4}, {ID: "g2", Amount: 6}}}
	for _, c := range []struct {
		actual int64
		want   Drawn
	}{
		{37, Drawn{Dedicated: 10, Shared: 10, Buffer: 10, Grant: 7, Grants: []GrantDraw{{ID: "g1", Amount: 4}, {ID: "g2", Amount: 3}}}},
		{34, Drawn{Dedicated: 10, Shared: 10, Buffer: 10, Grant: 4, Grants: []GrantDraw{{ID: "g1", Amount: 4}}}},
		{25, Drawn{Dedicated: 10, Shared: 10, Buffer: 5}},
		{12, Drawn{Dedicated: 10, Shared: 2}},
		{3, Drawn{Dedicated: 3}},
		{0, Drawn{}},
	} {
		got := Settle(d, 40, c.actual, true)
		if got.Dedicated != c.want.Dedicated || got.Shared != c.want.Shared || got.Buffer != c.want.Buffer ||
			got.Grant != c.want.Grant || FormatGrants(got.Grants) != FormatGrants(c.want.Grants) || (len(c.want.Grants) == 0) != (got.Grants == nil) {
			t.Errorf("actual %d: %+v, want %+v", c.actual, got, c.want)
		}
	}
	if FormatGrants(d.Grants) != "g1=4;g2=6" {
		t.Fatal("Settle changed the draw it was given")
	}
}

// A swept session of the current period stays charged its whole grant; a
// late finish trues it up; one of an earlier period touches no current
// counter.
func TestSweepAndLateFinishAcrossPeriods(t *testing.T) {
	m := twoLines(t, false)
	mustApply(t, m, ApplyReq{SessionID: "old", Line: "a", Amount: 50, Critical: true})
	m.NewPeriod(1)
	if err := m.Sweep("old"); err != nil || !m.Sessions["old"].Leaked || m.Lines["a"].Charged != 0 {
		t.Fatalf("sweep of an old period's session: %v, a %+v", err, m.Lines["a"])
	}
	if err := m.Sweep("old"); err != nil {
		t.Fatalf("second sweep: %v", err)
	}
	if _, err := m.Finish("old", 10); err != nil || m.Lines["a"].Charged != 0 || m.Lines["a"].Reserved != 0 {
		t.Fatalf("late finish of an old period: %v, a %+v", err, m.Lines["a"])
	}
}

// Buffer lent to the shared pool comes back only as far as the shared pool
// does not use it; a line's lent buffer only as far as the line does not
// hold it. Reclaim and give-back move only what is unused, between two
// different known lines.
func TestReturnReclaimAndGiveBackMoveOnlyWhatIsUnused(t *testing.T) {
	m := twoLines(t, false) // shared 600, buffer 100
	if err := m.Release("", 40); err != nil || m.SharedCap() != 640 || m.BufferFree() != 60 {
		t.Fatalf("release to shared: %v, cap %d, free %d", err, m.SharedCap(), m.BufferFree())
	}
	m.SharedUsed = 620
	if got := m.Return("", 100); got != 20 || m.SharedBuffer != 20 {
		t.Fatalf("returned %d from shared (buffer %d), want the 20 unused", got, m.SharedBuffer)
	}
	m.SharedUsed = 0
	if got := m.Return("", 5); got != 5 || m.SharedBuffer != 15 {
		t.Fatalf("returned %d, want what was asked", got)
	}
	if err := m.Release("a", 10); err != nil {
		t.Fatal(err)
	}
	m.Lines["a"].UsedBuffer = 4
	if got := m.Return("a", 100); got != 6 || m.Lines["a"].Buffer != 4 {
		t.Fatalf("returned %d from a, want its 6 unused", got)
	}
	if m.Return("zz", 5) != 0 {
		t.Fatal("returned from an unknown line")
	}
	for _, amount := range []int64{0, m.BufferFree() + 1} {
		if err := m.Release("a", amount); inputField(err) != "amount" {
			t.Errorf("release %d: %v", amount, err)
		}
	}
	if err := m.Release("zz", 1); inputField(err) != "businessLine" {
		t.Fatalf("release to an unknown line: %v", err)
	}
	if err := m.Release("a", m.BufferFree()); err != nil || m.BufferFree() != 0 {
		t.Fatalf("release of the whole free buffer: %v", err)
	}

	m = twoLines(t, false) // a: 200 dedicated, b: 100
	m.Lines["b"].UsedDedicated = 70
	if got := m.Reclaim("b", "a", 50); got != 30 || m.Lines["b"].Lent != 30 || m.Lines["a"].Reclaimed != 30 {
		t.Fatalf("reclaimed %d, want b's 30 unused", got)
	}
	if m.Reclaim("a", "a", 5) != 0 || m.Reclaim("a", "zz", 5) != 0 || m.Reclaim("zz", "a", 5) != 0 {
		t.Fatal("reclaim between a line and itself or an unknown line")
	}
	m.Lines["a"].UsedDedicated = 220 // a holds 20 of the 30 it got
	if got := m.GiveBack("b", "a", 100); got != 10 || m.Lines["b"].Lent != 20 || m.Lines["a"].Reclaimed != 20 {
		t.Fatalf("gave back %d, want the 10 a does not hold", got)
	}
	if m.GiveBack("b", "b", 5) != 0 || m.GiveBack("zz", "a", 5) != 0 || m.GiveBack("b", "zz", 5) != 0 {
		t.Fatal("give-back between a line and itself or an unknown line")
	}
	m.Lines["a"].UsedDedicated = 0
	if got := m.GiveBack("b", "a", 5); got != 5 {
		t.Fatalf("gave back %d of 5", got)
	}
	if err := m.VoidGrant("nope"); !errors.Is(err, ErrUnknownGrant) {
		t.Fatalf("void unknown: %v", err)
	}
}

// An operator cancels a WARNED or CONFIRMED reclaim; confirming one that is
// not WARNED is refused; reclaims read back from the store keep their ids
// growing past the largest.
func TestReclaimCancelConfirmAndSync(t *testing.T) {
	s := DefaultSettings()
	s.ReclaimConfirmSeconds = 0
	m, c := reclaimWorld(t, s)
	c.Tick(m, 0)
	c.Tick(m, 30_000)
	id := c.Reclaims[0].ID
	ev, err := c.Cancel(id, 5)
	if err != nil || ev.Kind != "RECLAIM_CANCELLED" || ev.Line != "idle" || ev.AtMs != 5 || c.Reclaims[0].State != ReclaimCancelled {
		t.Fatalf("cancel: %+v, %v", ev, err)
	}
	if _, err := c.Confirm(m, id, 6); !errors.Is(err, ErrReclaimState) {
		t.Fatalf("confirm of a cancelled reclaim: %v", err)
	}
	if _, err := c.Cancel("nope", 6); !errors.Is(err, ErrUnknownReclaim) {
		t.Fatalf("cancel unknown: %v", err)
	}
	c.Reclaims[0].State = ReclaimConfirmed
	if _, err := c.Cancel(id, 7); err != nil {
		t.Fatalf("cancel of a confirmed reclaim: %v", err)
	}
	c.SyncReclaims([]Reclaim{{ID: "r7", State: ReclaimWarned, From: "x"}, {ID: "r3", State: ReclaimExecuted}, {ID: "bad"}})
	if len(c.Reclaims) != 3 || c.Reclaims[0].ID != "bad" || c.Reclaims[2].ID != "r7" || c.nextID != 7 {
		t.Fatalf("synced %v, next id %d", c.Reclaims, c.nextID)
	}
	if !c.open("x") || c.open("y") {
		t.Fatal("an open reclaim is one WARNED or CONFIRMED from the line")
	}
	c.SyncReclaims([]Reclaim{{ID: "r2"}})
	if c.nextID != 7 {
		t.Fatalf("ids went back to %d", c.nextID)
	}
}
