package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// patchEnv is an admin service on miniredis and SQLite with a clock the
// test moves, and one policy "p" (TOKENS, 1000, daily).
type patchEnv struct {
	ops *admin.Service
	svc *quota.Service
	led *mysqlstore.Store
	clk *clock
}

func newPatchEnv(t *testing.T) patchEnv {
	t.Helper()
	rs, led := stores(t)
	sched := &period.Scheduler{}
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	svc := quota.NewService(rs, led, led, sched, quota.Options{Audit: led, Now: clk.Now})
	ops := admin.New(admin.Deps{Quota: svc, Live: rs, Ledger: led, Audit: led, Sched: sched, Now: clk.Now})
	if _, _, err := svc.PutPolicy(ctx(t), quota.Policy{ResourceName: "p", QuotaType: quota.TypeTokens, TotalLimit: 1000, ResetCron: "0 0 * * *"}); err != nil {
		t.Fatal(err)
	}
	return patchEnv{ops: ops, svc: svc, led: led, clk: clk}
}

// state is the stored policy of "p" and the number of its audit entries.
func (e patchEnv) state(t *testing.T) (quota.Policy, int) {
	t.Helper()
	p, err := e.led.GetPolicy(ctx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := e.svc.Audit(ctx(t), quota.AuditFilter{Resource: "p", Limit: quota.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	return p, len(recs)
}

// null for a member without a default is refused with one wording, whichever
// the member, and stores nothing.
func TestPatchPolicyNullForARequiredMemberIsRequired(t *testing.T) {
	e := newPatchEnv(t)
	before, n := e.state(t)
	e.clk.Add(time.Second)
	for _, c := range []struct{ patch, field string }{
		{`{"quotaType":null}`, "quotaType"},
		{`{"totalLimit":null}`, "totalLimit"},
		{`{"quotaType":null,"timezone":"Asia/Tokyo"}`, "quotaType"},
	} {
		_, err := e.ops.PatchPolicy(ctx(t), "p", []byte(c.patch), true, "")
		var ve *quota.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field || ve.Reason != "is required (null removes it)" {
			t.Errorf("%s: %v; want %s: is required (null removes it)", c.patch, err, c.field)
		}
	}
	if after, m := e.state(t); after != before || m != n {
		t.Fatalf("refused patches changed %+v into %+v or wrote audit entries (%d, was %d)", before, after, m, n)
	}
}

// A patch that changes nothing ({}, or the stored values) keeps the policy
// and its updatedAt and writes no audit entry; one that changes a value is
// stored and audited.
func TestPatchPolicyThatChangesNothingStoresNothing(t *testing.T) {
	e := newPatchEnv(t)
	before, n := e.state(t)
	for _, patch := range []string{`{}`, `{"totalLimit":1000,"failMode":"CLOSED"}`, `{"leakThresholdSeconds":null}`} {
		e.clk.Add(time.Second)
		got, err := e.ops.PatchPolicy(ctx(t), "p", []byte(patch), false, "noop")
		if err != nil || got != before {
			t.Errorf("%s: %+v, %v; want the stored %+v", patch, got, err, before)
		}
	}
	if after, m := e.state(t); after != before || m != n {
		t.Fatalf("no-op patches: policy %+v, %d audit entries; want %+v and %d", after, m, before, n)
	}
	e.clk.Add(time.Second)
	got, err := e.ops.PatchPolicy(ctx(t), "p", []byte(`{"totalLimit":2000}`), false, "more")
	if _, m := e.state(t); err != nil || got.TotalLimit != 2000 || !got.UpdatedAt.Equal(e.clk.Now()) || m != n+1 {
		t.Fatalf("a change: %+v, %v, %d audit entries; want limit 2000 updated now and %d entries", got, err, m, n+1)
	}
}
