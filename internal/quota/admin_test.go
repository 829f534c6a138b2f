package quota

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// auditStub is an AuditLog in process.
type auditStub struct {
	entries []AuditEntry
	err     error
	filter  AuditFilter
}

func (a *auditStub) RecordAudit(_ context.Context, e AuditEntry) error {
	if a.err != nil {
		return a.err
	}
	a.entries = append(a.entries, e)
	return nil
}

func (a *auditStub) ListAudit(_ context.Context, f AuditFilter) ([]AuditRecord, error) {
	a.filter = f
	if a.err != nil {
		return nil, a.err
	}
	out := []AuditRecord{} // newest first, as the AuditLog does
	for i := len(a.entries) - 1; i >= 0; i-- {
		id := int64(i + 1)
		if e := a.entries[i]; (f.Resource == "" || e.Resource == f.Resource) && (f.BeforeID == 0 || id < f.BeforeID) &&
			(f.Limit == 0 || len(out) < f.Limit) {
			out = append(out, AuditRecord{ID: id, AuditEntry: e})
		}
	}
	return out, nil
}

// PutPolicy fills the defaults, stamps the policy, stores it and makes the
// new limit live in the balance store at once.
func TestPutPolicyDefaultsStoresAndSetsTheLimit(t *testing.T) {
	var limit int64
	var stored Policy
	st := &stubs{
		setLimit:  func(_ string, l int64) error { limit = l; return nil },
		putPolicy: func(p Policy) (Policy, bool, error) { stored = p; return p, true, nil },
	}
	svc := newStubService(st, Options{})
	p, created, err := svc.PutPolicy(context.Background(), Policy{ResourceName: "r", QuotaType: TypeCount, TotalLimit: 7})
	if err != nil || !created {
		t.Fatalf("put: %v, created %v", err, created)
	}
	now := testEpoch.Add(time.Hour)
	if p.Timezone != "UTC" || p.LeakThresholdSeconds != DefaultLeakThresholdSeconds || p.FailMode != FailClosed ||
		!p.CreatedAt.Equal(now) || !p.UpdatedAt.Equal(now) || stored != p {
		t.Fatalf("stored %+v", p)
	}
	if limit != 7 || st.n("SetLimit") != 1 {
		t.Fatalf("limit set to %d (%d calls), want 7", limit, st.n("SetLimit"))
	}
	// Given values are kept.
	p, _, err = svc.PutPolicy(context.Background(), Policy{ResourceName: "r", QuotaType: TypeCount, TotalLimit: 7,
		Timezone: "Europe/Paris", LeakThresholdSeconds: 9, FailMode: FailOpen})
	if err != nil || p.Timezone != "Europe/Paris" || p.LeakThresholdSeconds != 9 || p.FailMode != FailOpen {
		t.Fatalf("put with values: %+v, %v", p, err)
	}
}

// A PUT drops this instance's cached policy: the next read sees the change.
func TestPutPolicyDropsTheCachedPolicy(t *testing.T) {
	lim := int64(100)
	st := &stubs{getPolicy: func(string) (Policy, error) { p := testPolicy; p.TotalLimit = lim; return p, nil }}
	svc := newStubService(st, Options{})
	ctx := context.Background()
	if _, err := svc.Policy(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	lim = 5
	if _, _, err := svc.PutPolicy(ctx, Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 5}); err != nil {
		t.Fatal(err)
	}
	if p, err := svc.Policy(ctx, "r"); err != nil || p.TotalLimit != 5 {
		t.Fatalf("after the PUT: %+v, %v; want the new limit 5", p, err)
	}
	lim = 6
	svc.ForgetPolicy("r")
	if p, _ := svc.Policy(ctx, "r"); p.TotalLimit != 6 {
		t.Fatalf("after ForgetPolicy: limit %d, want 6", p.TotalLimit)
	}
}

// A bad policy changes nothing anywhere; a store that fails is
// ErrUnavailable, and the limit is set only once the policy is stored.
func TestPutPolicyFailures(t *testing.T) {
	ctx := context.Background()
	good := Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 10}
	for _, c := range []struct {
		name  string
		p     func(Policy) Policy
		field string
	}{
		{"name", func(p Policy) Policy { p.ResourceName = "R"; return p }, "resourceName"},
		{"type", func(p Policy) Policy { p.QuotaType = "X"; return p }, "quotaType"},
		{"limit", func(p Policy) Policy { p.TotalLimit = 0; return p }, "totalLimit"},
		{"failMode", func(p Policy) Policy { p.FailMode = "MAYBE"; return p }, "failMode"},
		{"leak low", func(p Policy) Policy { p.LeakThresholdSeconds = -1; return p }, "leakThresholdSeconds"},
		{"leak high", func(p Policy) Policy { p.LeakThresholdSeconds = MaxLeakThresholdSeconds + 1; return p }, "leakThresholdSeconds"},
		{"timezone", func(p Policy) Policy { p.Timezone = "Bad/Zone"; return p }, "timezone"},
	} {
		st := &stubs{}
		svc := newStubService(st, Options{Audit: &auditStub{}})
		_, _, err := svc.PutPolicy(ctx, c.p(good))
		if field(err) != c.field || st.n("PutPolicy")+st.n("SetLimit")+st.n("GetPolicy") != 0 {
			t.Errorf("%s: %v (field %q, want %q); store calls %v", c.name, err, field(err), c.field, st.calls)
		}
	}
	for _, l := range []int64{1, MaxLeakThresholdSeconds} {
		p := good
		p.LeakThresholdSeconds = l
		if err := newStubService(&stubs{}, Options{}).ValidatePolicy(p); err != nil {
			t.Errorf("leak threshold %d refused: %v", l, err)
		}
	}

	st := &stubs{putPolicy: func(Policy) (Policy, bool, error) { return Policy{}, false, ErrUnavailable }}
	if _, _, err := newStubService(st, Options{}).PutPolicy(ctx, good); !errors.Is(err, ErrUnavailable) || st.n("SetLimit") != 0 {
		t.Fatalf("store down: %v, %d limits set; want ErrUnavailable and none", err, st.n("SetLimit"))
	}
	st = &stubs{setLimit: func(string, int64) error { return ErrUnavailable }}
	if _, _, err := newStubService(st, Options{}).PutPolicy(ctx, good); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("limit not set: %v, want ErrUnavailable (retry the PUT)", err)
	}
}

// With an audit log every change is recorded with who, why, and the policy
// before and after; a create has no before.
func TestPutPolicyIsAudited(t *testing.T) {
	log := &auditStub{}
	exists := false
	st := &stubs{
		getPolicy: func(res string) (Policy, error) {
			if !exists {
				return Policy{}, ErrResourceNotFound
			}
			p := testPolicy
			p.ResourceName = res
			return p, nil
		},
		putPolicy: func(p Policy) (Policy, bool, error) { return p, !exists, nil },
	}
	svc := newStubService(st, Options{Audit: log})
	ctx := WithReason(WithActor(context.Background(), "ops"), "launch")
	if _, _, err := svc.PutPolicy(ctx, Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 10}); err != nil {
		t.Fatal(err)
	}
	exists = true
	if _, _, err := svc.PutPolicy(ctx, Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 20}); err != nil {
		t.Fatal(err)
	}
	if len(log.entries) != 2 {
		t.Fatalf("%d audit entries, want 2", len(log.entries))
	}
	first, second := log.entries[0], log.entries[1]
	if first.Before != nil || first.Actor != "ops" || first.Reason != "launch" || first.Action != ActionPolicyPut ||
		first.Resource != "r" || !first.At.Equal(testEpoch.Add(time.Hour)) {
		t.Fatalf("create entry %+v", first)
	}
	var before, after map[string]any
	if err := json.Unmarshal(second.Before, &before); err != nil || before["totalLimit"] != float64(100) {
		t.Fatalf("update's before %s (%v): want the stored policy (limit 100)", second.Before, err)
	}
	if err := json.Unmarshal(second.After, &after); err != nil || after["totalLimit"] != float64(20) ||
		after["createdAt"] != "2025-06-01T01:00:00.000Z" {
		t.Fatalf("update's after %s (%v)", second.After, err)
	}

	// The before cannot be read: nothing is stored.
	st.getPolicy = func(string) (Policy, error) { return Policy{}, ErrUnavailable }
	calls := st.n("PutPolicy")
	if _, _, err := svc.PutPolicy(ctx, Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 30}); !errors.Is(err, ErrUnavailable) || st.n("PutPolicy") != calls {
		t.Fatalf("before unreadable: %v; stored %d times more", err, st.n("PutPolicy")-calls)
	}
	// The record cannot be written: the change is stored, the answer is
	// ErrUnavailable (a retry records it), and the limit is not yet set.
	st.getPolicy = nil
	for _, e := range []error{ErrUnavailable, errors.New("disk full")} {
		log.err = e
		limits := st.n("SetLimit")
		if _, _, err := svc.PutPolicy(ctx, Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: 30}); !errors.Is(err, ErrUnavailable) ||
			!errors.Is(err, e) || st.n("SetLimit") != limits {
			t.Fatalf("audit %v: %v", e, err)
		}
	}
}

func TestAuditListsWithAValidFilter(t *testing.T) {
	ctx := context.Background()
	if recs, err := newStubService(&stubs{}, Options{}).Audit(ctx, AuditFilter{}); err != nil || recs == nil || len(recs) != 0 {
		t.Fatalf("no audit log: %v, %v; want an empty list", recs, err)
	}
	log := &auditStub{entries: []AuditEntry{{Actor: "a"}}}
	svc := newStubService(&stubs{}, Options{Audit: log})
	recs, err := svc.Audit(ctx, AuditFilter{})
	if err != nil || len(recs) != 1 || log.filter.Limit != DefaultAuditLimit {
		t.Fatalf("%v, %v; limit asked %d, want the default %d", recs, err, log.filter.Limit, DefaultAuditLimit)
	}
	for _, f := range []AuditFilter{{Limit: 1}, {Limit: MaxAuditLimit}, {Resource: "r", BeforeID: 0}, {BeforeID: 1}} {
		want := f
		if want.Limit == 0 {
			want.Limit = DefaultAuditLimit
		}
		if _, err := svc.Audit(ctx, f); err != nil || log.filter != want {
			t.Errorf("filter %+v: %v, asked %+v", f, err, log.filter)
		}
	}
	for f, want := range map[AuditFilter]string{
		{Resource: "R"}: "resource", {Limit: -1}: "limit", {Limit: MaxAuditLimit + 1}: "limit", {BeforeID: -1}: "before",
	} {
		if _, err := svc.Audit(ctx, f); field(err) != want {
			t.Errorf("filter %+v: %v, want field %q", f, err, want)
		}
	}
	log.err = ErrUnavailable
	if _, err := svc.Audit(ctx, AuditFilter{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("log down: %v", err)
	}
}

func TestPoliciesListsThroughTheStore(t *testing.T) {
	st := &stubs{listPolicies: func() ([]Policy, error) { return []Policy{testPolicy}, nil }}
	svc := newStubService(st, Options{})
	if ps, err := svc.Policies(context.Background()); err != nil || len(ps) != 1 || ps[0].ResourceName != "r" {
		t.Fatalf("%v, %v", ps, err)
	}
	st.listPolicies = func() ([]Policy, error) { return nil, ErrUnavailable }
	if _, err := svc.Policies(context.Background()); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "list policies") {
		t.Fatalf("store down: %v", err)
	}
}
