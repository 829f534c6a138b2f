package poolctl_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

func (w *world) admin() *poolctl.Admin {
	return poolctl.NewAdmin(w.db, w.rs, sched{w.per}, func() time.Time { return w.clock })
}

func TestAdminRefusesBadInputAndChangesNothing(t *testing.T) {
	w := newWorld(t, pools.ElasticityOff)
	a := w.admin()
	before, err := a.Config(w.ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	now := w.clock.UnixMilli()
	bad := []struct {
		name string
		do   func() error
	}{
		{"unknown tier", func() error {
			_, _, err := a.PutLine(w.ctx, "llm", pools.LineSpec{Name: "c", Tier: "GOLD", Weight: 1})
			return err
		}},
		{"bad line name", func() error {
			_, _, err := a.PutLine(w.ctx, "llm", pools.LineSpec{Name: "C C", Tier: pools.TierCore, Weight: 1})
			return err
		}},
		{"dedicated above the pool", func() error {
			_, _, err := a.PutLine(w.ctx, "llm", pools.LineSpec{Name: "c", Tier: pools.TierCore, Dedicated: 30_001})
			return err
		}},
		{"shares not summing to 100", func() error {
			_, err := a.PutSettings(w.ctx, "llm", pools.Settings{SharedPercent: 60, DedicatedPercent: 30, BufferPercent: 20,
				BorrowLimitPercent: 50, Elasticity: pools.ElasticityAuto, ReclaimThresholdPercent: 90})
			return err
		}},
		{"negative grant", func() error {
			_, err := a.AddGrant(w.ctx, "llm", poolctl.GrantRequest{Amount: -5, ExpiresMs: now + 1000})
			return err
		}},
		{"grant expiring before it starts", func() error {
			_, err := a.AddGrant(w.ctx, "llm", poolctl.GrantRequest{Amount: 5, EffectiveMs: now + 5000, ExpiresMs: now + 1000})
			return err
		}},
		{"grant without expiry", func() error {
			_, err := a.AddGrant(w.ctx, "llm", poolctl.GrantRequest{Amount: 5})
			return err
		}},
		{"grant to an unknown line", func() error {
			_, err := a.AddGrant(w.ctx, "llm", poolctl.GrantRequest{Amount: 5, Line: "zz", ExpiresMs: now + 1000})
			return err
		}},
		{"release to an unknown line", func() error {
			_, err := a.Release(w.ctx, "llm", poolctl.GrantRequest{Amount: 5, Line: "zz"})
			return err
		}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var ve *quota.ValidationError
			if err := tt.do(); !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
		})
	}
	after, _ := a.Config(w.ctx, "llm")
	if len(after.Lines) != len(before.Lines) || after.Settings != before.Settings {
		t.Fatalf("bad input changed the configuration: %+v → %+v", before, after)
	}
	if gs, _ := a.Grants(w.ctx, "llm"); len(gs) != 0 {
		t.Fatalf("bad input recorded grants: %+v", gs)
	}
	if _, err := a.Release(w.ctx, "llm", poolctl.GrantRequest{Amount: 10_001, Line: "a"}); !errors.Is(err, poolctl.ErrBufferShort) {
		t.Fatalf("release above the buffer: %v", err)
	}
	if err := a.DeleteLine(w.ctx, "llm", "zz"); !errors.Is(err, pools.ErrUnknownLine) {
		t.Fatalf("delete of an unknown line: %v", err)
	}
	if _, _, err := a.PutLine(w.ctx, "nope", pools.LineSpec{Name: "c", Tier: pools.TierCore, Weight: 1}); !errors.Is(err, quota.ErrResourceNotFound) {
		t.Fatalf("line of an unknown resource: %v", err)
	}
}

func TestAdminLinesGrantsReleasesAndReclaims(t *testing.T) {
	w := newWorld(t, pools.ElasticityOff)
	a := w.admin()
	ll, created, err := a.PutLine(w.ctx, "llm", pools.LineSpec{Name: "c", Tier: pools.TierCore, Dedicated: 6000})
	if err != nil || !created || ll.Dedicated != 6000 || ll.BorrowCap != 3000 {
		t.Fatalf("put line: %+v %v %v", ll, created, err)
	}
	// The layout in Redis follows: c may draw its 6 000 dedicated.
	c := quota.ApplyCmd{ResourceName: "llm", SessionID: "c1", Amount: 6000, Period: w.per, Lease: time.Minute,
		Pools: &quota.PoolsCmd{Line: "c", Critical: true}}
	if r, err := w.rs.Apply(w.ctx, c); err != nil || r.Drawn.Dedicated != 6000 {
		t.Fatalf("apply on the new line: %+v %v", r, err)
	}
	g, err := a.AddGrant(w.ctx, "llm", poolctl.GrantRequest{Amount: 500, Line: "c", ExpiresMs: w.clock.Add(time.Hour).UnixMilli(), Reason: "launch"})
	if err != nil || g.ID == "" {
		t.Fatalf("grant: %+v %v", g, err)
	}
	rel, err := a.Release(w.ctx, "llm", poolctl.GrantRequest{Amount: 400, Line: "c", ExpiresMs: w.clock.Add(time.Minute).UnixMilli(), Reason: "promo"})
	if err != nil || rel.Amount != 400 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	gs, err := a.Grants(w.ctx, "llm")
	if err != nil || len(gs) != 2 {
		t.Fatalf("grants: %+v %v", gs, err)
	}
	if err := a.VoidGrant(w.ctx, "llm", g.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.VoidGrant(w.ctx, "llm", g.ID); !errors.Is(err, pools.ErrUnknownGrant) {
		t.Fatalf("second void: %v", err)
	}
	// The release expires: the controller returns it.
	w.clock = w.clock.Add(2 * time.Minute)
	evs, err := w.runner().Tick(w.ctx, w.pol)
	if err != nil || len(evs) != 1 || evs[0].Kind != "RETURN" || evs[0].Amount != 400 {
		t.Fatalf("expiry: %+v %v", evs, err)
	}
	if err := a.DeleteLine(w.ctx, "llm", "c"); err != nil {
		t.Fatalf("delete: %v", err) // c1's ledger row was never written: no open session in the ledger
	}

	r := pools.Reclaim{ID: "r1", From: "a", To: "b", Amount: 10, State: pools.ReclaimWarned, WarnedMs: 1, UpdateMs: 1}
	_ = w.db.PutReclaim(w.ctx, "llm", r)
	if got, err := a.SetReclaim(w.ctx, "llm", "r1", true); err != nil || got.State != pools.ReclaimConfirmed {
		t.Fatalf("confirm: %+v %v", got, err)
	}
	if _, err := a.SetReclaim(w.ctx, "llm", "r1", true); !errors.Is(err, pools.ErrReclaimState) {
		t.Fatalf("confirm twice: %v", err)
	}
	if got, err := a.SetReclaim(w.ctx, "llm", "r1", false); err != nil || got.State != pools.ReclaimCancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if _, err := a.SetReclaim(w.ctx, "llm", "r9", false); !errors.Is(err, pools.ErrUnknownReclaim) {
		t.Fatalf("unknown reclaim: %v", err)
	}
}

// TestAuditEntriesCarryTheOperatorsReason: the audit entry of a grant, a
// buffer release and a reclaim confirmed or cancelled has the operator's
// reason in its reason column (what the CLI's audit table shows), not only
// inside its after document. grant.add and buffer.release had "" there.
func TestAuditEntriesCarryTheOperatorsReason(t *testing.T) {
	w := newWorld(t, pools.ElasticityOff)
	a := w.admin()
	exp := w.clock.Add(time.Hour).UnixMilli()
	if _, err := a.AddGrant(w.ctx, "llm", poolctl.GrantRequest{Amount: 10, Line: "a", ExpiresMs: exp, Reason: "launch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(w.ctx, "llm", poolctl.GrantRequest{Amount: 10, Line: "a", Reason: "promo"}); err != nil {
		t.Fatal(err)
	}
	_ = w.db.PutReclaim(w.ctx, "llm", pools.Reclaim{ID: "r1", From: "a", To: "b", Amount: 10, State: pools.ReclaimWarned, WarnedMs: 1, UpdateMs: 1})
	if _, err := a.SetReclaim(quota.WithReason(w.ctx, "b needs it"), "llm", "r1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetReclaim(quota.WithReason(w.ctx, "changed my mind"), "llm", "r1", false); err != nil {
		t.Fatal(err)
	}
	recs, err := w.db.ListAudit(w.ctx, quota.AuditFilter{Resource: "llm", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{poolctl.ActionGrantAdd: "launch", poolctl.ActionBufferRelease: "promo",
		poolctl.ActionReclaimConfirm: "b needs it", poolctl.ActionReclaimCancel: "changed my mind"}
	for _, r := range recs {
		if w, ok := want[r.Action]; ok {
			if r.Reason != w {
				t.Errorf("%s: reason %q, want %q", r.Action, r.Reason, w)
			}
			delete(want, r.Action)
		}
	}
	if len(want) != 0 {
		t.Fatalf("entries missing: %v (of %+v)", want, recs)
	}
}
