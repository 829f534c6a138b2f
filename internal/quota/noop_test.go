package quota

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// settingsStore is a policy store that, like mysqlstore, writes nothing
// for a PUT of the stored settings and returns the stored policy.
func settingsStore(st *stubs) {
	var cur *Policy
	st.getPolicy = func(string) (Policy, error) {
		if cur == nil {
			return Policy{}, ErrResourceNotFound
		}
		return *cur, nil
	}
	st.putPolicy = func(p Policy) (Policy, bool, error) {
		switch {
		case cur == nil:
			cur = &p
			return p, true, nil
		case cur.SameSettings(p):
			return *cur, false, nil
		}
		p.CreatedAt = cur.CreatedAt
		*cur = p
		return p, false, nil
	}
}

// A PUT that changes nothing keeps the stored policy and its
// policyVersion and records no audit entry, but still makes the limit live
// (the retry after ErrUnavailable). A retry after a failed audit records
// the change the first PUT stored; once recorded, repeats record nothing.
func TestPutPolicyThatChangesNothing(t *testing.T) {
	now := testEpoch.Add(time.Hour)
	log := &auditStub{}
	var limits []int64
	st := &stubs{setLimit: func(_ string, l int64) error { limits = append(limits, l); return nil }}
	settingsStore(st)
	svc := newStubService(st, Options{Audit: log, Now: func() time.Time { return now }})
	ctx := WithActor(context.Background(), "ops")
	put := func(limit int64) (Policy, error) {
		t.Helper()
		now = now.Add(time.Minute)
		p, _, err := svc.PutPolicy(ctx, Policy{ResourceName: "r", QuotaType: TypeTokens, TotalLimit: limit, ResetCron: "daily"})
		return p, err
	}
	orig, err := put(10)
	if err != nil {
		t.Fatal(err)
	}
	version := svc.policyVersion(ctx, orig)

	again, err := put(10)
	if err != nil || again != orig || svc.policyVersion(ctx, again) != version {
		t.Fatalf("same PUT = %+v, %v (version %q); want the stored %+v (version %q)", again, err, svc.policyVersion(ctx, again), orig, version)
	}
	if len(log.entries) != 1 || len(limits) != 2 || limits[1] != 10 {
		t.Fatalf("%d audit entries (want 1), limits set %v (want [10 10])", len(log.entries), limits)
	}

	// The audit of a change fails: stored, ErrUnavailable, limit not set.
	log.err = ErrUnavailable
	if _, err := put(20); !errors.Is(err, ErrUnavailable) || len(limits) != 2 {
		t.Fatalf("audit down: %v, limits %v", err, limits)
	}
	// The retry changes nothing in the store, yet sets the limit and
	// records the change, once.
	log.err = nil
	changed, err := put(20)
	if err != nil || changed.TotalLimit != 20 || limits[len(limits)-1] != 20 || len(log.entries) != 2 {
		t.Fatalf("retry = %+v, %v; limits %v, %d audit entries (want 2)", changed, err, limits, len(log.entries))
	}
	var after PolicyView
	if err := json.Unmarshal(log.entries[1].After, &after); err != nil || after.TotalLimit != 20 {
		t.Fatalf("retry's entry after %s (%v)", log.entries[1].After, err)
	}
	if _, err := put(20); err != nil || len(log.entries) != 2 {
		t.Fatalf("repeat: %v, %d audit entries (want 2)", err, len(log.entries))
	}

	// The newest policy.put entry comes before a policy.delete (the policy
	// was deleted and stored again without a record): recorded again. Other
	// entries between do not count.
	log.entries = append(log.entries, AuditEntry{Action: ActionPolicyDelete, Resource: "r"},
		AuditEntry{Action: ActionSessionFinish, Resource: "r"}, AuditEntry{Action: ActionPolicyPut, Resource: "other"})
	if _, err := put(20); err != nil || len(log.entries) != 6 {
		t.Fatalf("after a delete: %v, %d audit entries (want 6)", err, len(log.entries))
	}
	if _, err := put(20); err != nil || len(log.entries) != 6 {
		t.Fatalf("once recorded: %v, %d audit entries (want 6)", err, len(log.entries))
	}
	// The audit log cannot be read: ErrUnavailable, the limit not set.
	log.err = errors.New("read timeout")
	n := len(limits)
	if _, err := put(20); !errors.Is(err, ErrUnavailable) || len(limits) != n {
		t.Fatalf("audit unreadable: %v, limits %v", err, limits)
	}
}
