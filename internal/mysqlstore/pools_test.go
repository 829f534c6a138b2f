package mysqlstore

import (
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

func TestPoolSettingsLinesGrantsAndReclaims(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		if ps, ok, err := s.PoolSettings(ctx, "llm"); err != nil || ok || ps != pools.DefaultSettings() {
			t.Fatalf("settings of a resource without any: %+v %v %v", ps, ok, err)
		}
		want := pools.Settings{SharedPercent: 50, DedicatedPercent: 40, BufferPercent: 10, BorrowLimitPercent: 300,
			Elasticity: pools.ElasticityOff, ReclaimThresholdPercent: 80, ReclaimConfirmSeconds: 0, ReclaimDryRun: true}
		if err := s.PutPoolSettings(ctx, "llm", want, t0); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := s.PoolSettings(ctx, "llm"); err != nil || !ok || got != want {
			t.Fatalf("settings: %+v %v %v", got, ok, err)
		}

		a := pools.LineSpec{Name: "search", Tier: pools.TierCore, Weight: 3}
		if created, err := s.PutLine(ctx, "llm", a, t0); err != nil || !created {
			t.Fatalf("create line: %v %v", created, err)
		}
		a.Tier, a.Weight = pools.TierGrowth, 0
		a.Dedicated = 500
		if created, err := s.PutLine(ctx, "llm", a, t0); err != nil || created {
			t.Fatalf("update line: %v %v", created, err)
		}
		if created, err := s.PutLine(ctx, "llm", a, t0); err != nil || created {
			t.Fatalf("unchanged line: %v %v", created, err)
		}
		_, _ = s.PutLine(ctx, "llm", pools.LineSpec{Name: "ads", Tier: pools.TierExplore, Weight: 1}, t0)
		lines, err := s.Lines(ctx, "llm")
		if err != nil || len(lines) != 2 || lines[0].Name != "ads" || lines[1] != a {
			t.Fatalf("lines %+v %v", lines, err)
		}
		if err := s.DeleteLine(ctx, "llm", "ads"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteLine(ctx, "llm", "ads"); !errors.Is(err, pools.ErrUnknownLine) {
			t.Fatalf("second delete: %v", err)
		}

		g := pools.GrantRecord{Grant: pools.Grant{ID: "g1", Line: "search", Amount: 100, EffectiveMs: 10, ExpiresMs: 2000},
			Kind: pools.KindGrant, Reason: "launch", CreatedMs: 5}
		if err := s.InsertGrant(ctx, "llm", g); err != nil {
			t.Fatal(err)
		}
		if err := s.VoidGrant(ctx, "llm", "g1", 50); err != nil {
			t.Fatal(err)
		}
		if err := s.VoidGrant(ctx, "llm", "g1", 60); !errors.Is(err, pools.ErrUnknownGrant) {
			t.Fatalf("second void: %v", err)
		}
		gs, err := s.Grants(ctx, "llm", 0)
		if err != nil || len(gs) != 1 || !gs[0].Voided || gs[0].VoidedMs != 50 || gs[0].Reason != "launch" {
			t.Fatalf("grants %+v %v", gs, err)
		}
		if gs, _ := s.Grants(ctx, "llm", 2000); len(gs) != 0 {
			t.Fatalf("expired grant listed: %+v", gs)
		}

		r := pools.Reclaim{ID: "r1", From: "ads", To: "search", Amount: 30, State: pools.ReclaimWarned, WarnedMs: 1, UpdateMs: 1, Reason: "x"}
		_ = s.PutReclaim(ctx, "llm", r)
		r.State, r.UpdateMs = pools.ReclaimExecuted, 9
		if err := s.PutReclaim(ctx, "llm", r); err != nil {
			t.Fatal(err)
		}
		if rs, err := s.Reclaims(ctx, "llm", 10); err != nil || len(rs) != 1 || rs[0] != r {
			t.Fatalf("reclaims %+v %v", rs, err)
		}
		if err := s.RecordPoolEvents(ctx, "llm", []pools.Event{{AtMs: 1, Kind: "LEND_REACTIVE", Line: "search", Amount: 7, Reason: "burst"}}); err != nil {
			t.Fatal(err)
		}
		if evs, err := s.PoolEvents(ctx, "llm", 10); err != nil || len(evs) != 1 || evs[0].Kind != "LEND_REACTIVE" || evs[0].Amount != 7 {
			t.Fatalf("events %+v %v", evs, err)
		}
		if n, err := s.OpenLineSessions(ctx, "llm", "search"); err != nil || n != 0 {
			t.Fatalf("open sessions %d %v", n, err)
		}
		if tot, err := s.PoolTotals(ctx, "llm", t0); err != nil || len(tot.Settled)+len(tot.Open) != 0 {
			t.Fatalf("totals %v %v", tot, err)
		}
	})
}
