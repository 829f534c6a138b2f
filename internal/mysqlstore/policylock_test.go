package mysqlstore

import (
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// TestUpdatePolicyLocked: check sees the pools stored under the lock (the
// stored limit, the lines, the grants not expired); its error is returned
// as it is and nothing is written; settings equal to the stored ones skip
// check and write nothing; a resource without a policy is not found and
// nothing is created.
func TestUpdatePolicyLocked(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		never := func(pools.State) error { t.Fatal("check called"); return nil }
		if _, found, err := s.UpdatePolicyLocked(ctx, testPolicy("none", 10, t0), 0, never); err != nil || found {
			t.Fatalf("no policy: found %v, %v", found, err)
		}
		if _, err := s.GetPolicy(ctx, "none"); !errors.Is(err, quota.ErrResourceNotFound) {
			t.Fatalf("a policy was created: %v", err)
		}
		pol := testPolicy("gpu", 1000, t0)
		if _, _, err := s.PutPolicy(ctx, pol); err != nil {
			t.Fatal(err)
		}
		line := pools.LineSpec{Name: "a", Tier: pools.TierCore, Weight: 1, Dedicated: 200}
		if _, err := s.PutLine(ctx, "gpu", line, t0); err != nil {
			t.Fatal(err)
		}
		if _, found, err := s.UpdatePolicyLocked(ctx, pol, 0, never); err != nil || !found {
			t.Fatalf("same settings: found %v, %v", found, err)
		}
		cut := pol
		cut.TotalLimit, cut.UpdatedAt = 500, t0.Add(time.Minute)
		refused := errors.New("refused")
		var seen pools.State
		_, found, err := s.UpdatePolicyLocked(ctx, cut, 0, func(st pools.State) error { seen = st; return refused })
		if !errors.Is(err, refused) || !found || seen.Limit != 1000 || len(seen.Lines) != 1 || seen.Lines[0] != line {
			t.Fatalf("refused: found %v, %v; check saw %+v", found, err, seen)
		}
		if got, _ := s.GetPolicy(ctx, "gpu"); got.TotalLimit != 1000 {
			t.Fatalf("a refused change was written: limit %d", got.TotalLimit)
		}
		got, found, err := s.UpdatePolicyLocked(ctx, cut, 0, func(pools.State) error { return nil })
		if err != nil || !found || got.TotalLimit != 500 || !got.CreatedAt.Equal(pol.CreatedAt) {
			t.Fatalf("accepted: %+v, %v, %v", got, found, err)
		}
		if stored, _ := s.GetPolicy(ctx, "gpu"); stored != got {
			t.Fatalf("stored %+v, returned %+v", stored, got)
		}
	})
}
