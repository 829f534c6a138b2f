package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Issue 23 §1: with Visits, a periodic pass skips a used resource nothing
// changed since its last clean reconciliation (no Redis command: not even
// its lock). A change through the store makes it due at the next pass; a
// drift the pass repairs (made behind the store's back, as a lost write
// would be) leaves it due at the pass after, which finds it clean; a
// visit older than the full-visit interval makes it due with no change.
func TestPeriodicPassesSkipQuietResources(t *testing.T) {
	ctx := context.Background()
	const res = "quiet"
	ledger, mr, inner, sched := oneSessionWorld(t, res)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	// The change log's clock: a second on at each pass (a change in the
	// very ms a visit starts counts as after it: due once more).
	clock := time.Now()
	tr := activity.New(rdb, activity.Options{Now: func() time.Time { return clock }})
	inner.OnChange(tr.Mutated)
	store := &testenv.CountingStore{Store: inner}
	full := time.Minute
	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond, Visits: tr.NewVisits(full)},
		store, ledger, ledger, sched, zap.NewNop(), prometheus.NewRegistry())
	pass := 0
	visited := func(what string, want bool) {
		t.Helper()
		pass++
		clock = clock.Add(time.Second)
		before := store.Calls
		reps, err := rec.Periodic(ctx, pass)
		if err != nil {
			t.Fatalf("%s: pass %d: %v", what, pass, err)
		}
		if got := store.Calls > before; got != want || len(reps) != store.Calls-before {
			t.Fatalf("%s: pass %d visited the resource: %v (%d reports), want %v", what, pass, got, len(reps), want)
		}
	}
	visited("first pass", true)
	visited("nothing changed", false)
	visited("nothing changed, a full pass", false)
	for range 8 { // to a pass that checks sessions one by one (every 10th)
		visited("nothing changed", false)
	}
	svc := quota.NewService(inner, ledger, ledger, sched, noCatchUp)
	if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: res, Amount: 3, SessionID: "s-2"}); err != nil {
		t.Fatal(err)
	}
	visited("after an apply", true)
	visited("nothing changed since", false)
	// 7 charged that no ledger row has: a drift no change named (found
	// only at the full visit), then a change elsewhere makes it due.
	bal := balanceKey(t, mr, res)
	if _, err := mr.HIncrBy(bal, "charged", 7); err != nil {
		t.Fatal(err)
	}
	visited("a drift the change log missed", false)
	tr.Mutated(res)
	visited("changed: the drift found and repaired", true)
	visited("after its repair", true)
	visited("clean since", false)
	clock = clock.Add(full)
	visited("past the full-visit interval", true)
	visited("clean since", false)
}

// balanceKey is the one balance key of res in mr.
func balanceKey(t *testing.T, mr interface{ Keys() []string }, res string) string {
	t.Helper()
	var found []string
	for _, k := range mr.Keys() {
		if len(k) > len("qc:{"+res+"}:b:") && k[:len("qc:{"+res+"}:b:")] == "qc:{"+res+"}:b:" {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("balance keys of %s: %v, want one", res, found)
	}
	return found[0]
}
