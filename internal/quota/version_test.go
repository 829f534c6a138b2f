package quota

import (
	"context"
	"testing"
	"time"
)

// TestPolicyVersionChangesWithThePolicyAndThePeriod pins the rule of the
// policyVersion in apply and heartbeat answers: the same while neither the
// policy nor the period changes, different after a reset and after a
// change of the policy, absent from a refusal.
func TestPolicyVersionChangesWithThePolicyAndThePeriod(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	pol := testPolicy
	st := &stubs{
		getPolicy: func(string) (Policy, error) { return pol, nil },
		heartbeat: func(string, string, string, time.Duration) (time.Time, error) { return now.Add(time.Minute), nil },
	}
	// A TTL past the test's days: no refresh reads pol in the background.
	svc := newStubService(st, Options{Now: func() time.Time { return now }, PolicyCacheTTL: 1000 * time.Hour})
	ctx := context.Background()
	beat := func() string {
		t.Helper()
		hb, err := svc.Heartbeat(ctx, "r", "s-1", "")
		if err != nil {
			t.Fatal(err)
		}
		return hb.PolicyVersion
	}
	ap, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5})
	if err != nil || ap.PolicyVersion == "" {
		t.Fatalf("apply: %+v, %v: want a policy version", ap, err)
	}
	if v := beat(); v != ap.PolicyVersion {
		t.Fatalf("heartbeat version %q, apply's %q: nothing changed in between", v, ap.PolicyVersion)
	}
	now = now.Add(24 * time.Hour) // the next daily period
	afterReset := beat()
	if afterReset == ap.PolicyVersion {
		t.Fatalf("version %q unchanged across a reset", afterReset)
	}
	pol.TotalLimit, pol.UpdatedAt = 50, now // a limit change
	svc.policies.drop("r")
	if v := beat(); v == afterReset || v == "" {
		t.Fatalf("version %q after a limit change, %q before", v, afterReset)
	}
	st.apply = func(ApplyCmd) (ApplyResult, error) { return ApplyResult{Outcome: ApplyExhausted}, nil }
	if ref, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5}); err != nil || !ref.Refused() || ref.PolicyVersion != "" {
		t.Fatalf("a refusal: %+v, %v: want no version", ref, err)
	}
}

// The pools' Version is folded into the policy version: it changes when the
// resource's pools change (announced: ForgetPolicy); a resource without any
// answers as without pools' stores; pools that cannot be read, and were
// never read, give no version.
func TestPolicyVersionFollowsThePools(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	st := &stubs{heartbeat: func(string, string, string, time.Duration) (time.Time, error) { return now.Add(time.Minute), nil }}
	src := &poolStub{}
	withPools := newStubService(st, pooled(st, src, Options{Now: func() time.Time { return now }}))
	without := newStubService(st, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	version := func(svc *Service) string {
		t.Helper()
		hb, err := svc.Heartbeat(ctx, "r", "s-1", "")
		if err != nil {
			t.Fatal(err)
		}
		return hb.PolicyVersion
	}
	plain := version(without)
	if v := version(withPools); v != plain || v == "" {
		t.Fatalf("no pools: version %q, without pools' stores %q", v, plain)
	}
	src.grants = oneGrant
	withPools.ForgetPolicy("r")
	v1 := version(withPools)
	src.lines = twoLines
	withPools.ForgetPolicy("r")
	v2 := version(withPools)
	if v1 == plain || v2 == v1 || v2 == plain || v2[:len(plain)] != plain {
		t.Fatalf("a grant: %q, and lines: %q, none: %q; want three versions", v1, v2, plain)
	}
	src.err = ErrUnavailable
	withPools.ForgetPolicy("r")
	if v := version(withPools); v != v2 {
		t.Fatalf("pools read before, unreadable now: version %q, want the last one read %q", v, v2)
	}
	fresh := newStubService(st, pooled(st, src, Options{Now: func() time.Time { return now }}))
	if v := version(fresh); v != "" {
		t.Fatalf("unreadable pools never read: version %q, want none", v)
	}
}
