package failover

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

type fakeRedis struct {
	mu       sync.Mutex
	masters  map[string]string
	mastErr  error
	heldBy   map[string]string // lock key → token
	drops    []string          // resource@periodMs
	dropErr  error
	unlocked int
	// stealOnDrop: the next DropBalance finds its lock taken by another
	// holder (as drop.lua would after the TTL ran out).
	stealOnDrop bool
}

func (f *fakeRedis) Masters(_ context.Context, rs []string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mastErr != nil {
		return nil, f.mastErr
	}
	out := map[string]string{}
	for _, r := range rs {
		if m, ok := f.masters[r]; ok {
			out[r] = m
		}
	}
	return out, nil
}

func (f *fakeRedis) TryLock(_ context.Context, r, name string, _ time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.heldBy[r+"/"+name] != "" {
		return "", nil
	}
	f.heldBy[r+"/"+name] = "mine"
	return "mine", nil
}

func (f *fakeRedis) Unlock(_ context.Context, r, name, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.heldBy[r+"/"+name] == token {
		delete(f.heldBy, r+"/"+name)
		f.unlocked++
	}
	return nil
}

func (f *fakeRedis) DropBalance(_ context.Context, r string, per quota.Period, fence quota.Fence) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropErr != nil {
		return f.dropErr
	}
	if f.stealOnDrop {
		// The watcher was cut off past its lock's TTL: another seeder took
		// the lock in between.
		f.heldBy[r+"/"+fence.Name] = "another-seeder"
		f.stealOnDrop = false
	}
	if fence.Token != "" && f.heldBy[r+"/"+fence.Name] != fence.Token {
		return quota.ErrLockLost
	}
	f.drops = append(f.drops, r+"@"+per.Start.UTC().Format(time.RFC3339))
	return nil
}

// policies are the policies and the active resources (all of them unless
// active is set), counting the reads.
type policies struct {
	mu     sync.Mutex
	pols   []quota.Policy
	active []string // nil: every policy's resource
	reads  int      // Policy calls
}

func newPolicies(ps ...quota.Policy) *policies { return &policies{pols: ps} }

func (p *policies) Active(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active != nil {
		return slices.Clone(p.active), nil
	}
	var out []string
	for _, q := range p.pols {
		out = append(out, q.ResourceName)
	}
	return out, nil
}

func (p *policies) Policy(_ context.Context, r string) (quota.Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	for _, q := range p.pols {
		if q.ResourceName == r {
			return q, nil
		}
	}
	return quota.Policy{}, quota.ErrResourceNotFound
}

func TestAChangedMasterRebuildsItsResourcesOnly(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 30, 0, 0, time.UTC)
	f := &fakeRedis{masters: map[string]string{"a": "n1/run1", "b": "n2/run1", "c": "n1/run1"}, heldBy: map[string]string{}}
	pol := func(r string) quota.Policy {
		return quota.Policy{ResourceName: r, QuotaType: quota.TypeCount, TotalLimit: 10, ResetCron: "0 0 * * *", Timezone: "UTC"}
	}
	var reconciled []string
	var rmu sync.Mutex
	ps := newPolicies(pol("a"), pol("b"), pol("c"))
	w := &Watcher{Topology: f, Balances: f, Active: ps, Policies: ps,
		Scheduler: &period.Scheduler{}, Now: func() time.Time { return now },
		Reconcile: func(_ context.Context, r string) error {
			rmu.Lock()
			defer rmu.Unlock()
			reconciled = append(reconciled, r)
			return nil
		}}
	ctx := context.Background()
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("first poll rebuilt %v: it only records", got)
	}
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("unchanged masters rebuilt %v", got)
	}

	// n1's replica is promoted: a and c move; b stays.
	f.masters["a"], f.masters["c"] = "n4/run2", "n4/run2"
	f.heldBy["c/seed:"+strconv.FormatInt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), 10)] = "someone" // c is being seeded
	got := w.Poll(ctx)
	if !slices.Equal(got, []string{"a"}) || len(f.drops) != 1 || f.drops[0] != "a@2026-12-01T00:00:00Z" || f.unlocked != 1 {
		t.Fatalf("rebuilt %v, drops %v, unlocks %d; want a's current period, its lock released", got, f.drops, f.unlocked)
	}
	// c waits for its seed lock; a failing drop is retried too.
	f.dropErr = errors.New("redis down")
	delete(f.heldBy, "c/seed:"+strconv.FormatInt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), 10))
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("rebuilt %v while dropping fails", got)
	}
	f.dropErr = nil
	if got := w.Poll(ctx); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("retry rebuilt %v, want c", got)
	}
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("nothing changed, rebuilt %v", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rmu.Lock()
		n := len(reconciled)
		rmu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconciled %v after the rebuilds, want a and c", reconciled)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// A master that does not answer: its resources are absent, not changed.
	delete(f.masters, "b")
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("an unanswered master rebuilt %v", got)
	}
	f.masters["b"] = "n2/run1"
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("b back on the same master rebuilt %v", got)
	}
	// Nor does an error of the topology itself.
	f.mastErr = errors.New("cluster down")
	if got := w.Poll(ctx); len(got) != 0 {
		t.Fatalf("rebuilt %v on a topology error", got)
	}
}

// TestADropUnderALostLockIsRefusedAndRetried (issue 11 §3.4, fencing): a
// watcher whose seed lock was taken by another seeder before its drop ran
// (cut off past the TTL) must not drop the balance that seeder wrote; the
// drop is refused under the fence and the resource is rebuilt at a later
// poll, under a lock of its own.
func TestADropUnderALostLockIsRefusedAndRetried(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 30, 0, 0, time.UTC)
	f := &fakeRedis{masters: map[string]string{"a": "n1/run1"}, heldBy: map[string]string{}}
	pol := quota.Policy{ResourceName: "a", QuotaType: quota.TypeCount, TotalLimit: 10, ResetCron: "0 0 * * *", Timezone: "UTC"}
	ps := newPolicies(pol)
	w := &Watcher{Topology: f, Balances: f, Active: ps, Policies: ps, Scheduler: &period.Scheduler{}, Now: func() time.Time { return now }}
	ctx := context.Background()
	w.Poll(ctx)
	f.masters["a"] = "n4/run2"
	f.stealOnDrop = true
	if got := w.Poll(ctx); len(got) != 0 || len(f.drops) != 0 {
		t.Fatalf("rebuilt %v, drops %v under a lock another seeder holds; want none", got, f.drops)
	}
	lock := "a/seed:" + strconv.FormatInt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), 10)
	if f.heldBy[lock] != "another-seeder" {
		t.Fatalf("the other seeder's lock is %q: the watcher released a lock not its own", f.heldBy[lock])
	}
	delete(f.heldBy, lock) // that seeder is done
	if got := w.Poll(ctx); !slices.Equal(got, []string{"a"}) || len(f.drops) != 1 {
		t.Fatalf("retry rebuilt %v, drops %v; want a, dropped once", got, f.drops)
	}
}
