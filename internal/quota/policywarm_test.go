package quota

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// batchStubs is stubs with a batch policy read (PolicyBatchReader),
// counted as "PoliciesOf"; unknown names are those in missing.
type batchStubs struct {
	*stubs
	missing map[string]bool
}

func (b batchStubs) PoliciesOf(ctx context.Context, resources []string) (map[string]Policy, error) {
	if err := b.enter(ctx, "PoliciesOf"); err != nil {
		return nil, err
	}
	out := map[string]Policy{}
	for _, r := range resources {
		if !b.missing[r] {
			p := testPolicy
			p.ResourceName = r
			out[r] = p
		}
	}
	return out, nil
}

// Statuses refreshes the expired policies of the resources it reads in
// one batch, not one query each (issue 23 §1: a scrape every 15 s found
// the 2 s policies of its 1,000 changed resources expired, and refreshed
// each with its own query); a policy changed while the batch is read is
// not overwritten, a deleted one is forgotten.
func TestStatusesRefreshesExpiredPoliciesInOneBatch(t *testing.T) {
	now := testEpoch
	st := batchStubs{stubs: &stubs{}, missing: map[string]bool{}}
	st.getPolicy = func(r string) (Policy, error) {
		if st.missing[r] {
			return Policy{}, ErrResourceNotFound
		}
		p := testPolicy
		p.ResourceName = r
		return p, nil
	}
	svc := NewService(st, st, st, daySched{}, Options{PolicyCacheTTL: 2 * time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("r-%03d", i)
	}
	for i, res := range svc.Statuses(ctx, names) {
		if res.Err != nil || res.Status.Policy.ResourceName != names[i] {
			t.Fatalf("%s: %+v", names[i], res)
		}
	}
	if b, g := st.n("PoliciesOf"), st.n("GetPolicy"); b != 1 || g != 0 {
		t.Fatalf("cold cache: %d batch reads and %d GetPolicy, want 1 and 0", b, g)
	}
	now = now.Add(15 * time.Second) // the next scrape: every policy expired
	st.missing["r-007"] = true
	before := st.n("GetPolicy")
	res := svc.Statuses(ctx, names)
	if b := st.n("PoliciesOf"); b != 2 {
		t.Fatalf("%d batch reads, want 2", b)
	}
	if g := st.n("GetPolicy") - before; g != 1 { // r-007's, which the batch did not find
		t.Fatalf("%d GetPolicy calls, want 1 (the deleted one's): each expired policy was refreshed on its own", g)
	}
	if res[7].Err == nil {
		t.Fatalf("r-007, deleted, answered %+v", res[7].Status)
	}
	// A fresh cache reads nothing.
	before = st.n("GetPolicy")
	svc.Statuses(ctx, names[8:])
	if b, g := st.n("PoliciesOf"), st.n("GetPolicy")-before; b != 2 || g != 0 {
		t.Fatalf("fresh policies read again: %d batch reads, %d GetPolicy", b, g)
	}
}
