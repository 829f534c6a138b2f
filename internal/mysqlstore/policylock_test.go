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

// TestUpdatePolicyLockedStoresThePoolSettingsWithIt: with quota.Policy.Pools
// the settings are what check sees and are written in the policy's
// transaction: refused, neither the limit nor the settings change;
// accepted, both; settings that are all that changed leave the policy's
// row (its UpdatedAt) as it was.
func TestUpdatePolicyLockedStoresThePoolSettingsWithIt(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		pol := testPolicy("gpu", 1000, t0)
		if _, _, err := s.PutPolicy(ctx, pol); err != nil {
			t.Fatal(err)
		}
		set := pools.DefaultSettings()
		set.SharedPercent, set.DedicatedPercent = 50, 40
		next := pol
		next.TotalLimit, next.UpdatedAt, next.Pools = 2000, t0.Add(time.Minute), &set
		refused := errors.New("refused")
		var seen pools.State
		if _, _, err := s.UpdatePolicyLocked(ctx, next, 0, func(st pools.State) error { seen = st; return refused }); !errors.Is(err, refused) {
			t.Fatalf("refused: %v", err)
		}
		if seen.Settings != set {
			t.Fatalf("check saw settings %+v, want the new %+v", seen.Settings, set)
		}
		got, _ := s.GetPolicy(ctx, "gpu")
		if stored, _, _ := s.PoolSettings(ctx, "gpu"); got.TotalLimit != 1000 || stored != pools.DefaultSettings() {
			t.Fatalf("refused, yet stored: limit %d, settings %+v", got.TotalLimit, stored)
		}
		ok := func(pools.State) error { return nil }
		if got, _, err := s.UpdatePolicyLocked(ctx, next, 0, ok); err != nil || got.TotalLimit != 2000 || got.Pools != nil {
			t.Fatalf("accepted: %+v %v", got, err)
		}
		if stored, _, _ := s.PoolSettings(ctx, "gpu"); stored != set {
			t.Fatalf("settings %+v, want %+v", stored, set)
		}
		before, _ := s.GetPolicy(ctx, "gpu")
		set2 := set
		set2.BorrowLimitPercent = 300
		only := before
		only.UpdatedAt, only.Pools = t0.Add(2*time.Minute), &set2
		if got, _, err := s.UpdatePolicyLocked(ctx, only, 0, ok); err != nil || !got.UpdatedAt.Equal(before.UpdatedAt) {
			t.Fatalf("settings only: %+v %v, want the policy as stored (updated %v)", got, err, before.UpdatedAt)
		}
		if stored, _, _ := s.PoolSettings(ctx, "gpu"); stored != set2 {
			t.Fatalf("settings only: stored %+v, want %+v", stored, set2)
		}
	})
}
