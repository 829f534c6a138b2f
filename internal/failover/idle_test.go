package failover

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// countingTopology counts the resources each Masters call asks about.
type countingTopology struct {
	*fakeRedis
	mu    sync.Mutex
	asked []int
}

func (c *countingTopology) Masters(ctx context.Context, rs []string) (map[string]string, error) {
	c.mu.Lock()
	c.asked = append(c.asked, len(rs))
	c.mu.Unlock()
	return c.fakeRedis.Masters(ctx, rs)
}

// Issue 23 §1: with 10,000 policies of which 10 are active, a poll asks
// the topology about the 10 and reads no policy; it used to read all
// 10,000 policies from MySQL and ask Redis about each, every second.
func TestIdleResourcesCostNothingPerPoll(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 30, 0, 0, time.UTC)
	f := &fakeRedis{masters: map[string]string{}, heldBy: map[string]string{}}
	ps := newPolicies()
	for i := range 10_000 {
		r := fmt.Sprintf("r%05d", i)
		f.masters[r] = "n1/run1"
		ps.pols = append(ps.pols, quota.Policy{ResourceName: r, QuotaType: quota.TypeCount, TotalLimit: 10, ResetCron: "0 0 * * *", Timezone: "UTC"})
		if i%1000 == 0 {
			ps.active = append(ps.active, r)
		}
	}
	topo := &countingTopology{fakeRedis: f}
	w := &Watcher{Topology: topo, Balances: f, Active: ps, Policies: ps, Scheduler: &period.Scheduler{}, Now: func() time.Time { return now }}
	ctx := context.Background()
	for range 3 {
		w.Poll(ctx)
	}
	if !slices.Equal(topo.asked, []int{10, 10, 10}) || ps.reads != 0 {
		t.Fatalf("3 polls asked the topology about %v resources and read %d policies; want 10 each and none", topo.asked, ps.reads)
	}
	// The master is replaced: only the active resources are rebuilt.
	for r := range f.masters {
		f.masters[r] = "n4/run2"
	}
	if got := w.Poll(ctx); len(got) != 10 || ps.reads != 10 {
		t.Fatalf("after a failover rebuilt %d resources with %d policy reads; want the 10 active ones", len(got), ps.reads)
	}
}

// A resource that becomes active between two polls has no master on
// record; when its master now is none the last poll saw (the failover
// happened in between), it is rebuilt; on a master seen before it is only
// recorded. A resource that went idle is forgotten.
func TestANewlyActiveResourceOnANewMasterIsRebuilt(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 30, 0, 0, time.UTC)
	pol := func(r string) quota.Policy {
		return quota.Policy{ResourceName: r, QuotaType: quota.TypeCount, TotalLimit: 10, ResetCron: "0 0 * * *", Timezone: "UTC"}
	}
	f := &fakeRedis{masters: map[string]string{"a": "n1/run1", "b": "n1/run1", "c": "n1/run1"}, heldBy: map[string]string{}}
	ps := newPolicies(pol("a"), pol("b"), pol("c"))
	ps.active = []string{"a"}
	w := &Watcher{Topology: f, Balances: f, Active: ps, Policies: ps, Scheduler: &period.Scheduler{}, Now: func() time.Time { return now }}
	ctx := context.Background()
	w.Poll(ctx)
	ps.active = []string{"a", "b"} // b on the master seen before
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("b newly active on a known master: rebuilt %v", got)
	}
	ps.active = []string{"a", "b", "c"}
	f.masters["c"] = "n4/run2" // c's master failed over before its first poll
	if got := w.Poll(ctx); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("c newly active on a master no poll saw: rebuilt %v, want c", got)
	}
	ps.active = []string{"c"}
	w.Poll(ctx)
	if len(w.masters) != 1 {
		t.Fatalf("watching %v after a and b went idle, want c only", w.masters)
	}
}
