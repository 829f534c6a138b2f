package mysqlstore

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// PoolTotals sums the finished sessions per line (what stays charged) and
// lists the open ones with their whole draw and id, for the seed to check
// each against Redis.
func TestPoolTotalsSettledAndOpen(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		rec := func(id, line string, granted int64, d quota.PoolSplit) quota.UsageRecord {
			r := usingRec(id, granted)
			r.BusinessLine, r.Drawn = line, d
			return r
		}
		mustInsert(t, s,
			rec("f1", "a", 100, quota.PoolSplit{Dedicated: 60, Shared: 30, Grant: 10, Grants: "g=10"}),
			rec("f2", "a", 50, quota.PoolSplit{Dedicated: 50}),
			rec("u1", "b", 70, quota.PoolSplit{Dedicated: 20, Shared: 40, Buffer: 10}),
			rec("u2", "a", 5, quota.PoolSplit{Shared: 5}),
			usingRec("plain", 40)) // no pools: not read
		if err := s.FinishSession(ctx, finishRec("f1", 55, 45, 0, period.Add(2*time.Hour))); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishSession(ctx, finishRec("f2", 50, 0, 0, period.Add(2*time.Hour))); err != nil {
			t.Fatal(err)
		}
		tot, err := s.PoolTotals(ctx, "gpu", period)
		if err != nil {
			t.Fatal(err)
		}
		// f1: 45 back (10 grant, 30 shared, 5 dedicated) → 55 dedicated; f2 all dedicated.
		if a := tot.Settled["a"]; len(tot.Settled) != 1 || a.Dedicated != 105 || a.Shared != 0 || a.Grant != 0 {
			t.Fatalf("settled %+v", tot.Settled)
		}
		slices.SortFunc(tot.Open, func(x, y pools.OpenDraw) int { return strings.Compare(x.SessionID, y.SessionID) })
		want := []pools.OpenDraw{
			{SessionID: "u1", Line: "b", Drawn: pools.Drawn{Dedicated: 20, Shared: 40, Buffer: 10}},
			{SessionID: "u2", Line: "a", Drawn: pools.Drawn{Shared: 5}},
		}
		if len(tot.Open) != 2 || tot.Open[0].SessionID != "u1" || tot.Open[0].Drawn.Total() != 70 || tot.Open[1].Line != "a" ||
			tot.Open[1].Drawn.Shared != 5 || tot.Open[0].Line != want[0].Line {
			t.Fatalf("open %+v, want %+v", tot.Open, want)
		}
		if by := tot.ByLine(); by["a"].Dedicated != 105 || by["a"].Shared != 5 || by["b"].Total() != 70 {
			t.Fatalf("by line %+v", by)
		}
	})
}

// GrantsHeld sums what finished sessions stay charged of each grant and
// lists the open sessions holding part of one with their whole draw.
func TestGrantsHeldSettledAndOpen(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		rec := func(id, line string, granted int64, d quota.PoolSplit) quota.UsageRecord {
			r := usingRec(id, granted)
			r.BusinessLine, r.Drawn = line, d
			return r
		}
		mustInsert(t, s,
			rec("f1", "a", 100, quota.PoolSplit{Dedicated: 60, Shared: 30, Grant: 10, Grants: "g=10"}), // 45 back: the grant first
			rec("f2", "a", 40, quota.PoolSplit{Grant: 40, Grants: "g=25;h=15"}),                        // all used
			rec("u1", "b", 30, quota.PoolSplit{Dedicated: 10, Grant: 20, Grants: "h=20"}),
			rec("u2", "b", 5, quota.PoolSplit{Dedicated: 5})) // no grant: not read
		for _, f := range []quota.UsageRecord{finishRec("f1", 55, 45, 0, period.Add(2*time.Hour)), finishRec("f2", 40, 0, 0, period.Add(2*time.Hour))} {
			if err := s.FinishSession(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		use, err := s.GrantsHeld(ctx, "gpu", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(use.Settled) != 2 || use.Settled["g"] != 25 || use.Settled["h"] != 15 {
			t.Fatalf("settled %v", use.Settled)
		}
		if len(use.Open) != 1 || use.Open[0].SessionID != "u1" || use.Open[0].Line != "b" ||
			len(use.Open[0].Drawn.Grants) != 1 || use.Open[0].Drawn.Grants[0] != (pools.GrantDraw{ID: "h", Amount: 20}) {
			t.Fatalf("open %+v", use.Open)
		}
	})
}
