package mysqlstore

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

// PooledOf names the resources Grants (with the same since) or Lines
// would answer something for, over more names than one query takes.
func TestPooledOfNamesTheResourcesWithLinesOrGrants(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		grant := func(r, id string, expires int64) {
			t.Helper()
			g := pools.GrantRecord{Grant: pools.Grant{ID: id, Amount: 10, EffectiveMs: 1, ExpiresMs: expires}, Kind: pools.KindGrant, CreatedMs: 1}
			if err := s.InsertGrant(ctx, r, g); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.PutLine(ctx, "lined", pools.LineSpec{Name: "search", Tier: pools.TierCore, Weight: 1}, t0); err != nil {
			t.Fatal(err)
		}
		grant("granted", "g1", 5000)
		grant("expired", "g2", 1000)
		grant("voided", "g3", 5000)
		if err := s.VoidGrant(ctx, "voided", "g3", 2); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutLine(ctx, "both", pools.LineSpec{Name: "ads", Tier: pools.TierCore, Weight: 1}, t0); err != nil {
			t.Fatal(err)
		}
		grant("both", "g4", 5000)
		names := []string{"lined", "granted", "expired", "voided", "both"}
		for i := range 1200 { // three queries' worth
			names = append(names, fmt.Sprintf("plain-%04d", i))
		}
		got, err := s.PooledOf(ctx, names, 2000)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, r := range names { // what a resource's Lines and Grants say
			ls, err := s.Lines(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			gs, err := s.Grants(ctx, r, 2000)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) > 0 || len(gs) > 0 {
				want[r] = true
			}
		}
		if !maps.Equal(got, want) || len(want) != 4 {
			t.Fatalf("PooledOf = %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		if got, err := s.PooledOf(ctx, nil, 0); err != nil || len(got) != 0 {
			t.Fatalf("no names: %v %v", got, err)
		}
	})
}
