package admin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// countingStore is the policy store with its per-resource pool reads and
// its batch read counted.
type countingStore struct {
	*mysqlstore.Store
	mu    sync.Mutex
	reads map[string]int // resource → per-resource reads (policy, settings, lines, grants)
	batch int
}

func (c *countingStore) count(resource string) {
	c.mu.Lock()
	c.reads[resource]++
	c.mu.Unlock()
}

func (c *countingStore) GetPolicy(ctx context.Context, r string) (quota.Policy, error) {
	c.count(r)
	return c.Store.GetPolicy(ctx, r)
}

func (c *countingStore) Lines(ctx context.Context, r string) ([]pools.LineSpec, error) {
	c.count(r)
	return c.Store.Lines(ctx, r)
}

func (c *countingStore) PoolSettings(ctx context.Context, r string) (pools.Settings, bool, error) {
	c.count(r)
	return c.Store.PoolSettings(ctx, r)
}

func (c *countingStore) Grants(ctx context.Context, r string, since int64) ([]pools.GrantRecord, error) {
	c.count(r)
	return c.Store.Grants(ctx, r, since)
}

func (c *countingStore) PooledOf(ctx context.Context, rs []string, since int64) (map[string]bool, error) {
	c.mu.Lock()
	c.batch++
	c.mu.Unlock()
	return c.Store.PooledOf(ctx, rs, since)
}

// The pool gauges' batch read (issue 23 §1): with 400 resources beside
// one with lines, StatusOf reads the store one resource at a time only for
// the one with lines (and one with a grant): one batch query for the rest,
// whose answers are "no pools"; the pooled ones' answers are Status's.
// Before, the gauges read each resource's policy, settings, lines and
// grants (7 queries each).
func TestStatusOfReadsOnlyPooledResourcesOneByOne(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	st := &countingStore{Store: w.DB, reads: map[string]int{}}
	a := admin.NewPools(st, w.RS, w.Quota(quota.Breakers{}), w, w.Now)
	names := []string{"llm"}
	for i := range 400 {
		names = append(names, putPlain(t, w, fmt.Sprintf("plain-%03d", i)))
	}
	granted := names[7]
	grant(t, w, granted, "g1")
	sts, oks, errs := a.StatusOf(w.Ctx, names)
	for i, r := range names {
		if errs[i] != nil {
			t.Fatalf("%s: %v", r, errs[i])
		}
		if want := r == "llm" || r == granted; oks[i] != want {
			t.Fatalf("%s: ok = %v, want %v", r, oks[i], want)
		}
	}
	if st.batch != 1 {
		t.Fatalf("%d batch reads, want 1", st.batch)
	}
	for r, n := range st.reads {
		if r != "llm" && r != granted {
			t.Fatalf("%s, without pools, was read one by one (%d reads): %v", r, n, st.reads)
		}
	}
	want, ok, err := a.Status(w.Ctx, "llm")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got := sts[0]; got.Layout.Shared != want.Layout.Shared || len(got.Layout.Lines) != len(want.Layout.Lines) || got.Model.SharedUsed != want.Model.SharedUsed {
		t.Fatalf("llm's status %+v, Status says %+v", got, want)
	}
	if gs := sts[7].Grants; len(gs) != 1 || gs[0].ID != "g1" {
		t.Fatalf("%s's grants: %+v", granted, gs)
	}
}

// gatedGrants is the policy store whose grants read of each resource
// waits in an InFlight: reads made one after another never get past the
// first (it fails at the context's deadline).
type gatedGrants struct {
	*mysqlstore.Store
	f *testenv.InFlight
}

func (g gatedGrants) Grants(ctx context.Context, r string, since int64) ([]pools.GrantRecord, error) {
	if err := g.f.Enter(ctx); err != nil {
		return nil, err
	}
	return g.Store.Grants(ctx, r, since)
}

// StatusOf reads the resources that use pools concurrently (at most
// admin.ScrapeWorkers at once), not one after another: a scrape right
// after a load of n pooled resources waited for n rounds of their ~7 reads.
// Four resources with a grant each: their grants reads must all be in
// flight at once before any answers.
func TestStatusOfReadsPooledResourcesConcurrently(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	f := testenv.NewInFlight(4)
	a := admin.NewPools(gatedGrants{Store: w.DB, f: f}, w.RS, w.Quota(quota.Breakers{}), w, w.Now)
	var names []string
	for i := range 6 {
		names = append(names, putPlain(t, w, fmt.Sprintf("plain-%d", i)))
		if i%3 != 0 { // plain-0 and plain-3 use no pools
			grant(t, w, names[i], "g"+names[i])
		}
	}
	ctx, cancel := context.WithTimeout(w.Ctx, 10*time.Second)
	defer cancel()
	sts, oks, errs := a.StatusOf(ctx, names)
	for i, r := range names {
		if errs[i] != nil {
			t.Fatalf("%s: %v (read one after another, the first grants read waits for the others)", r, errs[i])
		}
		if want := i%3 != 0; oks[i] != want {
			t.Fatalf("%s: ok = %v, want %v", r, oks[i], want)
		}
		if oks[i] && (len(sts[i].Grants) != 1 || sts[i].Grants[0].ID != "g"+r) {
			t.Fatalf("%s's grants: %+v", r, sts[i].Grants)
		}
	}
	if m := f.Max(); m > admin.ScrapeWorkers {
		t.Fatalf("%d reads in flight at once, want at most %d", m, admin.ScrapeWorkers)
	}
}

// putPlain stores the world's policy under name (no lines) and returns name.
func putPlain(t *testing.T, w *testenv.PoolWorld, name string) string {
	t.Helper()
	p := w.Pol
	p.ResourceName = name
	if _, _, err := w.DB.PutPolicy(w.Ctx, p); err != nil {
		t.Fatal(err)
	}
	return name
}

// grant gives resource a grant id of 10 units in force for a minute.
func grant(t *testing.T, w *testenv.PoolWorld, resource, id string) {
	t.Helper()
	g := pools.GrantRecord{Grant: pools.Grant{ID: id, Amount: 10, EffectiveMs: 1, ExpiresMs: w.Now().UnixMilli() + 60_000},
		Kind: pools.KindGrant, CreatedMs: 1}
	if err := w.DB.InsertGrant(w.Ctx, resource, g); err != nil {
		t.Fatal(err)
	}
}
