package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// poolAdmin is the pools' administration of w, with a quota Service on w's
// stores.
func poolAdmin(w *testenv.PoolWorld) *admin.Pools {
	return admin.NewPools(w.DB, w.RS, w.Quota(quota.Breakers{}), w, w.Now)
}

func TestAdminRefusesBadInputAndChangesNothing(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	a := poolAdmin(w)
	before, err := a.Config(w.Ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	now := w.Clock.UnixMilli()
	bad := []struct {
		name string
		do   func() error
	}{
		{"unknown tier", func() error {
			_, _, err := a.PutLine(w.Ctx, "llm", pools.LineSpec{Name: "c", Tier: "GOLD", Weight: 1})
			return err
		}},
		{"bad line name", func() error {
			_, _, err := a.PutLine(w.Ctx, "llm", pools.LineSpec{Name: "C C", Tier: pools.TierCore, Weight: 1})
			return err
		}},
		{"dedicated above the pool", func() error {
			_, _, err := a.PutLine(w.Ctx, "llm", pools.LineSpec{Name: "c", Tier: pools.TierCore, Dedicated: 30_001})
			return err
		}},
		{"shares not summing to 100", func() error {
			_, err := a.PutSettings(w.Ctx, "llm", pools.Settings{SharedPercent: 60, DedicatedPercent: 30, BufferPercent: 20,
				BorrowLimitPercent: 50, Elasticity: pools.ElasticityAuto, ReclaimThresholdPercent: 90})
			return err
		}},
		{"negative grant", func() error {
			_, err := a.AddGrant(w.Ctx, "llm", admin.GrantRequest{Amount: -5, ExpiresMs: now + 1000})
			return err
		}},
		{"grant expiring before it starts", func() error {
			_, err := a.AddGrant(w.Ctx, "llm", admin.GrantRequest{Amount: 5, EffectiveMs: now + 5000, ExpiresMs: now + 1000})
			return err
		}},
		{"grant without expiry", func() error {
			_, err := a.AddGrant(w.Ctx, "llm", admin.GrantRequest{Amount: 5})
			return err
		}},
		{"grant to an unknown line", func() error {
			_, err := a.AddGrant(w.Ctx, "llm", admin.GrantRequest{Amount: 5, Line: "zz", ExpiresMs: now + 1000})
			return err
		}},
		{"release to an unknown line", func() error {
			_, err := a.Release(w.Ctx, "llm", admin.GrantRequest{Amount: 5, Line: "zz"})
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
	after, _ := a.Config(w.Ctx, "llm")
	if len(after.Lines) != len(before.Lines) || after.Settings != before.Settings {
		t.Fatalf("bad input changed the configuration: %+v → %+v", before, after)
	}
	if gs, _ := a.Grants(w.Ctx, "llm"); len(gs) != 0 {
		t.Fatalf("bad input recorded grants: %+v", gs)
	}
	if _, err := a.Release(w.Ctx, "llm", admin.GrantRequest{Amount: 10_001, Line: "a"}); !errors.Is(err, admin.ErrBufferShort) {
		t.Fatalf("release above the buffer: %v", err)
	}
	if err := a.DeleteLine(w.Ctx, "llm", "zz"); !errors.Is(err, pools.ErrUnknownLine) {
		t.Fatalf("delete of an unknown line: %v", err)
	}
	if _, _, err := a.PutLine(w.Ctx, "nope", pools.LineSpec{Name: "c", Tier: pools.TierCore, Weight: 1}); !errors.Is(err, quota.ErrResourceNotFound) {
		t.Fatalf("line of an unknown resource: %v", err)
	}
}

func TestAdminLinesGrantsReleasesAndReclaims(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	a := poolAdmin(w)
	ll, created, err := a.PutLine(w.Ctx, "llm", pools.LineSpec{Name: "c", Tier: pools.TierCore, Dedicated: 6000})
	if err != nil || !created || ll.Dedicated != 6000 || ll.BorrowCap != 3000 {
		t.Fatalf("put line: %+v %v %v", ll, created, err)
	}
	// The layout in Redis follows: c may draw its 6 000 dedicated.
	c := quota.ApplyCmd{ResourceName: "llm", SessionID: "c1", Amount: 6000, Period: w.Per, Lease: time.Minute,
		Pools: &quota.PoolsCmd{Line: "c", Critical: true}}
	if r, err := w.RS.Apply(w.Ctx, c); err != nil || r.Drawn.Dedicated != 6000 {
		t.Fatalf("apply on the new line: %+v %v", r, err)
	}
	g, err := a.AddGrant(w.Ctx, "llm", admin.GrantRequest{Amount: 500, Line: "c", ExpiresMs: w.Clock.Add(time.Hour).UnixMilli(), Reason: "launch"})
	if err != nil || g.ID == "" {
		t.Fatalf("grant: %+v %v", g, err)
	}
	rel, err := a.Release(w.Ctx, "llm", admin.GrantRequest{Amount: 400, Line: "c", ExpiresMs: w.Clock.Add(time.Minute).UnixMilli(), Reason: "promo"})
	if err != nil || rel.Amount != 400 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	gs, err := a.Grants(w.Ctx, "llm")
	if err != nil || len(gs) != 2 {
		t.Fatalf("grants: %+v %v", gs, err)
	}
	if v, err := a.VoidGrant(w.Ctx, "llm", g.ID); err != nil || v.Kind != pools.KindGrant || v.Returned != 0 {
		t.Fatalf("void: %+v %v", v, err)
	}
	if _, err := a.VoidGrant(w.Ctx, "llm", g.ID); !errors.Is(err, pools.ErrUnknownGrant) {
		t.Fatalf("second void: %v", err)
	}
	// The release expires: the controller returns it.
	w.Clock = w.Clock.Add(2 * time.Minute)
	evs, err := poolctl.New(w.DB, w.RS, w.DB, w, zap.NewNop(), prometheus.NewRegistry(), 0, w.Now).Tick(w.Ctx, w.Pol)
	if err != nil || len(evs) != 1 || evs[0].Kind != "RETURN" || evs[0].Amount != 400 {
		t.Fatalf("expiry: %+v %v", evs, err)
	}
	// c1's ledger row was never written (as for an apply between its
	// script and its row), but Redis holds it open: the delete is refused,
	// and the line takes sessions again.
	if err := a.DeleteLine(w.Ctx, "llm", "c"); !errors.Is(err, admin.ErrLineBusy) {
		t.Fatalf("delete with c1 open in Redis: %v, want ErrLineBusy", err)
	}
	c2 := c
	c2.SessionID, c2.Amount = "c2", 10
	if r, err := w.RS.Apply(w.Ctx, c2); err != nil || r.Granted != 10 {
		t.Fatalf("apply on c after the refused delete: %+v %v", r, err)
	}
	for _, id := range []string{"c1", "c2"} {
		if _, err := w.RS.Finish(w.Ctx, quota.FinishCmd{ResourceName: "llm", SessionID: id, Actual: 1, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteLine(w.Ctx, "llm", "c"); err != nil {
		t.Fatalf("delete: %v", err)
	}

	r := pools.Reclaim{ID: "r1", From: "a", To: "b", Amount: 10, State: pools.ReclaimWarned, WarnedMs: 1, UpdateMs: 1}
	_ = w.DB.PutReclaim(w.Ctx, "llm", r)
	if got, err := a.SetReclaim(w.Ctx, "llm", "r1", true); err != nil || got.State != pools.ReclaimConfirmed {
		t.Fatalf("confirm: %+v %v", got, err)
	}
	if _, err := a.SetReclaim(w.Ctx, "llm", "r1", true); !errors.Is(err, pools.ErrReclaimState) {
		t.Fatalf("confirm twice: %v", err)
	}
	if got, err := a.SetReclaim(w.Ctx, "llm", "r1", false); err != nil || got.State != pools.ReclaimCancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if _, err := a.SetReclaim(w.Ctx, "llm", "r9", false); !errors.Is(err, pools.ErrUnknownReclaim) {
		t.Fatalf("unknown reclaim: %v", err)
	}
}

// TestAuditEntriesCarryTheOperatorsReason: the audit entry of a grant, a
// buffer release and a reclaim confirmed or cancelled has the operator's
// reason in its reason column (what the CLI's audit table shows), not only
// inside its after document. grant.add and buffer.release had "" there.
func TestAuditEntriesCarryTheOperatorsReason(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	a := poolAdmin(w)
	exp := w.Clock.Add(time.Hour).UnixMilli()
	if _, err := a.AddGrant(w.Ctx, "llm", admin.GrantRequest{Amount: 10, Line: "a", ExpiresMs: exp, Reason: "launch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(w.Ctx, "llm", admin.GrantRequest{Amount: 10, Line: "a", Reason: "promo"}); err != nil {
		t.Fatal(err)
	}
	_ = w.DB.PutReclaim(w.Ctx, "llm", pools.Reclaim{ID: "r1", From: "a", To: "b", Amount: 10, State: pools.ReclaimWarned, WarnedMs: 1, UpdateMs: 1})
	if _, err := a.SetReclaim(quota.WithReason(w.Ctx, "b needs it"), "llm", "r1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetReclaim(quota.WithReason(w.Ctx, "changed my mind"), "llm", "r1", false); err != nil {
		t.Fatal(err)
	}
	recs, err := w.DB.ListAudit(w.Ctx, quota.AuditFilter{Resource: "llm", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{admin.ActionGrantAdd: "launch", admin.ActionBufferRelease: "promo",
		admin.ActionReclaimConfirm: "b needs it", admin.ActionReclaimCancel: "changed my mind"}
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

// TestPoolCallsGoThroughTheBreakers: the pools' administration and the
// controller call MySQL and Redis through the backend breakers
// (admin.GuardPools; the quota Service's calls, through its own): an
// open breaker refuses the call before it reaches the store, and every call
// let through is counted by the breaker of its backend.
func TestPoolCallsGoThroughTheBreakers(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityReactive)
	ledger, redis := &testenv.Breaker{}, &testenv.Breaker{}
	brk := quota.Breakers{Ledger: ledger, Balances: redis}
	gl, gs := admin.GuardPools(w.DB, w.RS, brk)
	a := admin.NewPools(gl, gs, w.Quota(brk), w, w.Now)
	if _, _, err := a.Status(w.Ctx, "llm"); err != nil {
		t.Fatal(err)
	}
	if ledger.Calls == 0 || redis.Calls == 0 {
		t.Fatalf("calls counted: MySQL %d, Redis %d", ledger.Calls, redis.Calls)
	}
	r := poolctl.New(gl, gs, gl, w, zap.NewNop(), prometheus.NewRegistry(), 0, w.Now)
	before := redis.Calls
	if _, err := r.Tick(w.Ctx, w.Pol); err != nil || redis.Calls == before {
		t.Fatalf("controller tick: %v, Redis calls %d → %d", err, before, redis.Calls)
	}
	ledger.Open = true
	if _, _, err := a.PutLine(w.Ctx, "llm", pools.LineSpec{Name: "c", Tier: pools.TierCore, Weight: 1}); !errors.Is(err, testenv.ErrBreakerOpen) {
		t.Fatalf("put line with the MySQL breaker open: %v", err)
	}
	if lines, err := w.DB.Lines(w.Ctx, "llm"); err != nil || len(lines) != 2 {
		t.Fatalf("lines after the refused call: %+v %v", lines, err)
	}
	ledger.Open, redis.Open = false, true
	if _, err := a.Release(w.Ctx, "llm", admin.GrantRequest{Amount: 10, Line: "a", Reason: "x"}); !errors.Is(err, testenv.ErrBreakerOpen) {
		t.Fatalf("release with the Redis breaker open: %v", err)
	}
	if m := w.Model(t); m.Lines["a"].Buffer != 0 {
		t.Fatalf("buffer moved with the Redis breaker open: %d", m.Lines["a"].Buffer)
	}
	r.Release(w.Ctx)
}
