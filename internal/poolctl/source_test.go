package poolctl_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// TestSourceServesItsLastAnswerWhileMySQLIsDown: with the MySQL breaker
// open, PoolsOf answers the last lines it read (past their TTL, and after
// Forget), for a resource with lines and one without, so that an apply of a
// failMode OPEN resource still reaches Redis and is counted live (docs/
// design.md §8). It used to fail, and the apply was granted fail-open
// recorded nowhere. A resource never read has no answer: the error stands.
func TestSourceServesItsLastAnswerWhileMySQLIsDown(t *testing.T) {
	w := newWorld(t, pools.ElasticityReactive)
	plain := w.pol
	plain.ResourceName = "plain"
	if _, _, err := w.db.PutPolicy(w.ctx, plain); err != nil {
		t.Fatal(err)
	}
	ledger := &breaker{}
	gl, gs := poolctl.Guarded(w.db, w.rs, quota.Breakers{Ledger: ledger, Balances: &breaker{}})
	admin := poolctl.NewAdmin(gl, gs, sched{w.per}, func() time.Time { return w.clock })
	src := poolctl.NewSource(admin, time.Second)
	want := map[string]int{"llm": 2, "plain": 0}
	for r, n := range want {
		if use, err := src.PoolsOf(w.ctx, r); err != nil || len(use.Lines) != n {
			t.Fatalf("%s with MySQL up: %+v %v", r, use, err)
		}
	}
	ledger.open = true
	w.clock = w.clock.Add(time.Hour) // far past the TTL
	src.Forget("llm")
	for r, n := range want {
		use, err := src.PoolsOf(w.ctx, r)
		if err != nil || len(use.Lines) != n {
			t.Fatalf("%s with MySQL down: %+v %v, want the last answer (%d lines)", r, use, err, n)
		}
		if r == "llm" && (use.Lines["a"] != pools.TierGrowth || use.Version == "") {
			t.Fatalf("stale answer of llm: %+v", use)
		}
	}
	if _, err := src.PoolsOf(w.ctx, "never-read"); !errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("a resource never read, MySQL down: %v, want unavailable", err)
	}
	// MySQL back: a change made meanwhile is read again at once.
	ledger.open = false
	if _, err := w.db.PutLine(w.ctx, "plain", pools.LineSpec{Name: "x", Tier: pools.TierCore, Weight: 1}, w.clock); err != nil {
		t.Fatal(err)
	}
	if use, err := src.PoolsOf(w.ctx, "plain"); err != nil || use.Lines["x"] != pools.TierCore {
		t.Fatalf("plain after MySQL is back: %+v %v", use, err)
	}
}
