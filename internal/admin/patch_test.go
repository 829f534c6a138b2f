package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// patchEnv is an admin service on miniredis and SQLite with a clock the
// test moves, and one policy "p" (TOKENS, 1000, daily).
func patchEnv(t *testing.T) (*admin.Service, *quota.Service, *mysqlstore.Store, *clock) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	led, err := mysqlstore.OpenSQLite(ctx(t), ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = led.Close() })
	if err := led.Migrate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	rs := redisstore.New(rdb)
	sched := &period.Scheduler{}
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	svc := quota.NewService(rs, led, led, sched, quota.Options{Audit: led, Now: clk.Now})
	ops := admin.New(admin.Deps{Quota: svc, Live: rs, Ledger: led, Audit: led, Sched: sched, Now: clk.Now})
	if _, _, err := svc.PutPolicy(ctx(t), quota.Policy{ResourceName: "p", QuotaType: quota.TypeTokens, TotalLimit: 1000, ResetCron: "0 0 * * *"}); err != nil {
		t.Fatal(err)
	}
	return ops, svc, led, clk
}

func auditCount(t *testing.T, svc *quota.Service) int {
	t.Helper()
	recs, err := svc.Audit(ctx(t), quota.AuditFilter{Resource: "p", Limit: quota.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// null for a member without a default is refused with one wording, whichever
// the member, and stores nothing.
func TestPatchPolicyNullForARequiredMemberIsRequired(t *testing.T) {
	ops, svc, led, clk := patchEnv(t)
	before, err := led.GetPolicy(ctx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	n := auditCount(t, svc)
	clk.Add(time.Second)
	for _, c := range []struct{ patch, field string }{
		{`{"quotaType":null}`, "quotaType"},
		{`{"totalLimit":null}`, "totalLimit"},
		{`{"quotaType":null,"timezone":"Asia/Tokyo"}`, "quotaType"},
	} {
		_, err := ops.PatchPolicy(ctx(t), "p", []byte(c.patch), true, "")
		var ve *quota.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field || ve.Reason != "is required (null removes it)" {
			t.Errorf("%s: %v; want %s: is required (null removes it)", c.patch, err, c.field)
		}
	}
	if after, err := led.GetPolicy(ctx(t), "p"); err != nil || after != before || auditCount(t, svc) != n {
		t.Fatalf("refused patches changed %+v into %+v (%v) or wrote audit entries (%d, was %d)", before, after, err, auditCount(t, svc), n)
	}
}

// A patch that changes nothing ({}, or the stored values) keeps the policy
// and its updatedAt and writes no audit entry; one that changes a value is
// stored and audited.
func TestPatchPolicyThatChangesNothingStoresNothing(t *testing.T) {
	ops, svc, led, clk := patchEnv(t)
	before, err := led.GetPolicy(ctx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	n := auditCount(t, svc)
	for _, patch := range []string{`{}`, `{"totalLimit":1000,"failMode":"CLOSED"}`, `{"leakThresholdSeconds":null}`} {
		clk.Add(time.Second)
		got, err := ops.PatchPolicy(ctx(t), "p", []byte(patch), false, "noop")
		if err != nil || got != before {
			t.Errorf("%s: %+v, %v; want the stored %+v", patch, got, err, before)
		}
	}
	if after, err := led.GetPolicy(ctx(t), "p"); err != nil || after != before || auditCount(t, svc) != n {
		t.Fatalf("no-op patches: policy %+v (%v), %d audit entries; want %+v and %d", after, err, auditCount(t, svc), before, n)
	}
	clk.Add(time.Second)
	got, err := ops.PatchPolicy(ctx(t), "p", []byte(`{"totalLimit":2000}`), false, "more")
	if err != nil || got.TotalLimit != 2000 || !got.UpdatedAt.Equal(clk.Now()) || auditCount(t, svc) != n+1 {
		t.Fatalf("a change: %+v, %v, %d audit entries; want limit 2000 updated now and %d entries", got, err, auditCount(t, svc), n+1)
	}
}
