package pools

import (
	"fmt"
	"testing"
)

// RefuseShare: nothing below the watermark; non-critical applies from the
// watermark to all of them halfway to 100 %; critical ones only from there;
// a line that may reach nothing is left to the draw.
func TestRefuseShareRefusesNonCriticalFirst(t *testing.T) {
	for _, c := range []struct {
		used, reach, wm int64
		critical        bool
		want            int64
	}{
		{5, 0, 6000, false, 0},
		{59, 100, 6000, false, 0},
		{60, 100, 6000, false, 0},
		{70, 100, 6000, false, 5000},
		{80, 100, 6000, false, 10000},
		{80, 100, 6000, true, 0},
		{90, 100, 6000, true, 5000},
		{100, 100, 6000, true, 10000},
		{9750, 10000, 9500, false, 10000},
	} {
		if got := RefuseShare(c.used, c.reach, c.wm, c.critical); got != c.want {
			t.Errorf("RefuseShare(%d, %d, %d, %v) = %d, want %d", c.used, c.reach, c.wm, c.critical, got, c.want)
		}
	}
}

// explore: an EXPLORE line (watermark 60 %) whose use is held at 70 % of
// what it can reach: half of its non-critical applies are refused, none of
// its critical ones.
func explore(t *testing.T) *Model {
	t.Helper()
	lay, err := Plan(1000, Settings{SharedPercent: 0, DedicatedPercent: 100, BufferPercent: 0, BorrowLimitPercent: 0,
		Elasticity: ElasticityOff, ReclaimThresholdPercent: 90}, []LineSpec{{Name: "x", Tier: TierExplore, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, true)
	mustApply(t, m, ApplyReq{SessionID: "fill", Line: "x", Amount: 700, Continuation: true})
	return m
}

// The refused proportion is the server's: whatever ids a caller sends
// (sequential, one prefix, or ids that the old per-id hash let through),
// the same applies are refused, exactly half of them; none passes by its id.
func TestNoChoiceOfIdsPassesTheWatermark(t *testing.T) {
	// Ids the former bucket hash (h ← 31h + byte mod 4294967291, mod 10000)
	// put at 9000 or above: all of them passed a 50 % watermark then.
	var lucky []string
	for i := 0; len(lucky) < 400; i++ {
		sid := fmt.Sprintf("lucky-%d", i)
		var h int64
		for j := 0; j < len(sid); j++ {
			h = (h*31 + int64(sid[j])) % 4294967291
		}
		if h%10000 >= 9000 {
			lucky = append(lucky, sid)
		}
	}
	var want []bool
	for _, ids := range [][]string{nil, lucky, nil} {
		m := explore(t)
		var got []bool
		refused := 0
		for i := range 400 {
			sid := fmt.Sprintf("seq-%d", i)
			if ids != nil {
				sid = ids[i]
			} else if want != nil {
				sid = fmt.Sprintf("another-client-%d", 7*i)
			}
			d := mustApply(t, m, ApplyReq{SessionID: sid, Line: "x", Amount: 1})
			got = append(got, d.Reason == ReasonWatermark)
			if d.Reason == ReasonWatermark {
				refused++
				continue
			}
			if d.Reason != "" {
				t.Fatalf("%s: %+v", sid, d)
			}
			if _, err := m.Finish(sid, 0); err != nil { // the line stays at 70 %
				t.Fatal(err)
			}
		}
		if refused != 200 {
			t.Fatalf("refused %d of 400 non-critical applies at a share of 50 %%, want 200", refused)
		}
		if want != nil && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("another choice of ids changed which applies are refused")
		}
		want = got
		for i := range 100 {
			if d := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("crit-%d", i), Line: "x", Amount: 1, Critical: true}); d.Reason != "" {
				t.Fatalf("critical apply refused at 70 %% (its share starts at 80 %%): %+v", d)
			}
			_, _ = m.Finish(fmt.Sprintf("crit-%d", i), 0)
		}
	}
}

// The shared pool keeps no part for CORE: a GROWTH line may fill it past
// its watermark's share (the tier reservation, GROWTH to 80 %, that seed
// 003 does not have, refused the lines below CORE there), and a CORE
// critical apply still gets the rest.
func TestSharedPoolHasNoTierReservation(t *testing.T) {
	lay, err := Plan(1000, DefaultSettings(), []LineSpec{{Name: "c", Tier: TierCore, Weight: 1}, {Name: "g", Tier: TierGrowth, Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, true) // shared 600, c and g 150 dedicated each
	d := mustApply(t, m, ApplyReq{SessionID: "g", Line: "g", Amount: 150 + 540, Continuation: true})
	if d.Reason != "" || d.Drawn.Shared != 540 {
		t.Fatalf("GROWTH continuation to 90 %% of the shared pool: %+v", d)
	}
	d = mustApply(t, m, ApplyReq{SessionID: "c", Line: "c", Amount: 150 + 60, Critical: true})
	if d.Reason != "" || d.Drawn.Shared != 60 {
		t.Fatalf("CORE critical after it: %+v, want the last 60 of the shared pool", d)
	}
}

// The whole shared pool is grantable: one line borrowing alone takes it,
// each apply at most half of what is left, down to less than two applies'
// worth, which a continuation then takes.
func TestTheWholeSharedPoolIsGrantable(t *testing.T) {
	lay, err := Plan(10_000, DefaultSettings(), LineNames(12))
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(lay, false)
	l := m.Lines["explore-5"]
	got := int64(0)
	for i := 0; ; i++ {
		d := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("s%d", i), Line: l.Name, Amount: 10, Critical: true})
		if d.Reason != "" {
			if d.Reason != ReasonLineExhausted || m.SharedFree() >= 20 {
				t.Fatalf("refused %+v with %d free", d, m.SharedFree())
			}
			break
		}
		got += d.Granted
	}
	free := m.SharedFree()
	if d := mustApply(t, m, ApplyReq{SessionID: "cont", Line: l.Name, Amount: free, Continuation: true}); d.Reason != "" {
		t.Fatalf("continuation for the last %d: %+v", free, d)
	}
	if got+free != l.Dedicated+lay.Shared || m.SharedFree() != 0 {
		t.Fatalf("one line got %d of its %d dedicated + %d shared", got+free, l.Dedicated, lay.Shared)
	}
}
