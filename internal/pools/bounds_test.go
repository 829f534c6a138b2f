package pools

import (
	"strings"
	"testing"
)

// A grant is usable from its start (inclusive) to its expiry (exclusive);
// one used up is not drawn again; grants expiring together are drawn in
// id order.
func TestGrantWindowsAndOrder(t *testing.T) {
	lay, _ := Plan(0, DefaultSettings(), nil)
	m := NewModel(lay, false)
	_ = m.AddGrant(Grant{ID: "b", Amount: 5, EffectiveMs: 100, ExpiresMs: 200})
	_ = m.AddGrant(Grant{ID: "a", Amount: 5, EffectiveMs: 100, ExpiresMs: 200})
	if d := mustApply(t, m, ApplyReq{SessionID: "early", Amount: 1, Now: 99}); d.Reason != ReasonExhausted {
		t.Fatalf("before the start: %+v", d)
	}
	d := mustApply(t, m, ApplyReq{SessionID: "1", Amount: 7, Now: 100})
	if FormatGrants(d.Drawn.Grants) != "a=5;b=2" {
		t.Fatalf("at the start: %+v, want a (same expiry, earlier id) then b", d.Drawn)
	}
	d = mustApply(t, m, ApplyReq{SessionID: "2", Amount: 3, Now: 199})
	if FormatGrants(d.Drawn.Grants) != "b=3" {
		t.Fatalf("with a used up: %+v, want only b", d.Drawn)
	}
	_, _ = m.Finish("2", 0)
	if d := mustApply(t, m, ApplyReq{SessionID: "3", Amount: 1, Now: 200}); d.Reason != ReasonExhausted {
		t.Fatalf("at the expiry: %+v", d)
	}
	// A line's grant is not another line's; a grant for all is everyone's.
	ml := twoLines(t, false)
	_ = ml.AddGrant(Grant{ID: "ga", Line: "a", Amount: 10, ExpiresMs: 1000})
	_ = ml.AddGrant(Grant{ID: "all", Amount: 10, ExpiresMs: 1000})
	mustApply(t, ml, ApplyReq{SessionID: "fill", Line: "b", Amount: 150, Critical: true})
	ml.SharedUsed = ml.SharedCap() // the others filled the shared pool
	d = mustApply(t, ml, ApplyReq{SessionID: "b1", Line: "b", Amount: 15, Min: 1, Critical: true})
	if d.Granted != 10 || FormatGrants(d.Drawn.Grants) != "all=10" {
		t.Fatalf("b drew %+v, want only the grant for all", d)
	}
}

// A partial grant is made when at least minAmount remains (exactly
// minAmount too); all-or-nothing is refused whatever remains.
func TestPartialGrantAtMinAmount(t *testing.T) {
	lay, _ := Plan(10, DefaultSettings(), nil)
	m := NewModel(lay, false)
	if d := mustApply(t, m, ApplyReq{SessionID: "1", Amount: 20, Min: 10}); d.Granted != 10 {
		t.Fatalf("min = what remains: %+v", d)
	}
	m = NewModel(lay, false)
	if d := mustApply(t, m, ApplyReq{SessionID: "1", Amount: 20}); d.Reason != ReasonExhausted || d.Granted != 0 {
		t.Fatalf("all or nothing: %+v", d)
	}
	if d := mustApply(t, m, ApplyReq{SessionID: "2", Amount: 20, Min: 11}); d.Reason != ReasonExhausted {
		t.Fatalf("min above what remains: %+v", d)
	}
}

// What a line may use counts buffer lent to it.
func TestMayUseCountsLentBuffer(t *testing.T) {
	m := twoLines(t, false) // a: 200 dedicated, borrow 100
	_ = m.Release("a", 30)
	if a := m.Lines["a"]; a.MayUse() != 330 || a.OwnDedicated() != 200 {
		t.Fatalf("may use %d, own %d", a.MayUse(), a.OwnDedicated())
	}
}

// Only strictly rising rates raise a watermark: an equal sample anywhere
// in the three breaks the run. The event says the use that allowed it.
func TestWatermarkNeedsStrictlyRisingRates(t *testing.T) {
	for _, rates := range [][4]int64{{1, 1, 2, 3}, {1, 2, 2, 3}, {1, 2, 3, 3}, {1, 2, 3, 4}} {
		s := newSampler(t, ElasticityPredictive)
		a := s.m.Lines["a"]
		a.UsedDedicated, a.UsedShared = 60_000, 7_500
		for _, r := range rates {
			s.sample(30*r, SampleMs)
		}
		raised := eventsOf(s.evs, "WATERMARK_RAISED")
		if want := rates == [4]int64{1, 2, 3, 4}; (len(raised) == 1) != want {
			t.Errorf("rates %v: raised %v, want %v", rates, raised, want)
		}
		if len(raised) == 1 && !strings.Contains(raised[0].Reason, "use is 75.00%") {
			t.Errorf("reason %q does not state the use", raised[0].Reason)
		}
	}
}

// A burst with no free buffer lends nothing (no event of 0); a resource of
// limit 0 is ticked without harm.
func TestControllerEdges(t *testing.T) {
	s := newSampler(t, ElasticityReactive)
	_ = s.m.Release("", s.m.BufferFree()) // all the buffer lent to the shared pool
	s.sample(1125, SampleMs)
	s.sample(1125, SampleMs)
	if evs := s.sample(2250, SampleMs); len(eventsOf(evs, "LEND_REACTIVE")) != 0 {
		t.Fatalf("lent from an empty buffer: %v", evs)
	}
	lay, _ := Plan(0, DefaultSettings(), []LineSpec{{Name: "a", Tier: TierCore, Weight: 1}})
	m := NewModel(lay, true)
	c := NewController(DefaultSettings(), 0)
	for i := range int64(8) {
		m.Lines["a"].Consumed += i
		c.Tick(m, i*SampleMs)
	}
	if m.Lines["a"].Watermark > MaxWatermark || m.BufferFree() != 0 {
		t.Fatalf("zero limit: %+v", m.Lines["a"])
	}
}
