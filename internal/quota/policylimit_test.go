package quota

import (
	"context"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

// TestPutPolicyChecksTheLimitUnderThePoolsLock: an update is checked and
// written through PoolConfig.UpdatePolicyLocked (one turn with the pools'
// changes); a limit that with the grants not expired passes 2^53-1 is
// refused naming totalLimit with nothing stored or set; a policy not found
// there is created, checked first against lines a deleted policy left
// behind.
func TestPutPolicyChecksTheLimitUnderThePoolsLock(t *testing.T) {
	ctx := context.Background()
	pol := Policy{ResourceName: "r", QuotaType: TypeCount, TotalLimit: 7}
	st := &stubs{}
	big := []pools.GrantRecord{{Grant: pools.Grant{ID: "g", Amount: pools.MaxAmount - 5, ExpiresMs: pools.MaxAmount}, Kind: pools.KindGrant}}
	svc := newStubService(st, pooled(st, &poolStub{grants: big}, Options{}))
	if _, _, err := svc.PutPolicy(ctx, pol); field(err) != "totalLimit" || st.n("UpdatePolicyLocked") != 1 ||
		st.n("PutPolicy") != 0 || st.n("SetLimit") != 0 {
		t.Fatalf("limit + grants over 2^53-1: %v; locked %d, stored %d, set %d", err, st.n("UpdatePolicyLocked"), st.n("PutPolicy"), st.n("SetLimit"))
	}
	pol.TotalLimit = 5
	if _, _, err := svc.PutPolicy(ctx, pol); err != nil || st.n("PutPolicy") != 1 {
		t.Fatalf("limit + grants at 2^53-1: %v; stored %d", err, st.n("PutPolicy"))
	}

	st = &stubs{}
	tooBig := []pools.LineSpec{{Name: "chat", Tier: pools.TierCore, Dedicated: 100}}
	svc = newStubService(st, pooled(st, &poolStub{lines: tooBig, absent: true}, Options{}))
	if _, _, err := svc.PutPolicy(ctx, pol); field(err) != "totalLimit" || st.n("CreatePolicy") != 0 {
		t.Fatalf("a new policy the left lines do not fit: %v; created %d", err, st.n("CreatePolicy"))
	}
	st = &stubs{}
	svc = newStubService(st, pooled(st, &poolStub{absent: true}, Options{}))
	if _, created, err := svc.PutPolicy(ctx, pol); err != nil || !created || st.n("CreatePolicy") != 1 || st.n("PutPolicy") != 0 {
		t.Fatalf("a new policy: created %v, %v; created %d, stored %d", created, err, st.n("CreatePolicy"), st.n("PutPolicy"))
	}
}
