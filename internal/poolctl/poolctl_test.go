package poolctl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// world is one resource with two GROWTH lines (limit 100 000: dedicated
// 15 000 each, borrowing limit 7 500, buffer 10 000) on miniredis and SQLite.
type world struct {
	ctx   context.Context
	rs    *redisstore.Store
	db    *mysqlstore.Store
	pol   quota.Policy
	per   quota.Period
	clock time.Time
	n     int
	mr    *miniredis.Miniredis
}

func newWorld(t *testing.T, el pools.Elasticity) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	db, err := mysqlstore.OpenSQLite(ctx, ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w := &world{ctx: ctx, rs: redisstore.New(rdb), db: db, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), mr: mr}
	w.pol = quota.Policy{ResourceName: "llm", QuotaType: quota.TypeTokens, TotalLimit: 100_000, Timezone: "UTC",
		LeakThresholdSeconds: 300, FailMode: quota.FailClosed, CreatedAt: w.clock.Add(-time.Hour), UpdatedAt: w.clock}
	if _, _, err := db.PutPolicy(ctx, w.pol); err != nil {
		t.Fatal(err)
	}
	set := pools.DefaultSettings()
	set.Elasticity = el
	lines := []pools.LineSpec{{Name: "a", Tier: pools.TierGrowth, Weight: 1}, {Name: "b", Tier: pools.TierGrowth, Weight: 1}}
	for _, l := range lines {
		if _, err := db.PutLine(ctx, "llm", l, w.clock); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutPoolSettings(ctx, "llm", set, w.clock); err != nil {
		t.Fatal(err)
	}
	lay, _ := pools.Plan(w.pol.TotalLimit, set, lines)
	// A period around miniredis' clock (the real one), never ending.
	w.per = quota.Period{Start: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
	if _, err := w.rs.Seed(ctx, "llm", w.per, w.pol.TotalLimit, quota.PeriodTotals{}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.SetPoolLayout(ctx, "llm", lay, &pools.Moves{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.SeedPools(ctx, "llm", w.per, pools.Totals{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// sched gives the world's period whatever the time.
type sched struct{ per quota.Period }

func (s sched) PeriodAt(quota.Policy, time.Time) (quota.Period, error) { return s.per, nil }

func (w *world) use(t *testing.T, line string, amount int64) {
	t.Helper()
	w.n++
	c := quota.ApplyCmd{ResourceName: "llm", SessionID: "s" + time.Duration(w.n).String(), Amount: amount, Period: w.per, Lease: time.Minute,
		Pools: &quota.PoolsCmd{Line: line, Critical: true, Continuation: true}}
	r, err := w.rs.Apply(w.ctx, c)
	if err != nil || r.Reason != "" {
		t.Fatalf("apply %s %d: %v %+v", line, amount, err, r)
	}
}

func (w *world) runner() *poolctl.Runner {
	return poolctl.New(w.db, w.rs, w.db, sched{w.per}, zap.NewNop(), prometheus.NewRegistry(), 0, func() time.Time { return w.clock })
}

func TestReactiveBurstLendsTheBufferAndIsRecorded(t *testing.T) {
	w := newWorld(t, pools.ElasticityReactive)
	r := w.runner()
	var all []pools.Event
	for i, amount := range []int64{0, 100, 100, 6000} {
		w.use(t, "a", max(amount, 1))
		evs, err := r.Tick(w.ctx, w.pol)
		if err != nil {
			t.Fatalf("tick %d: %v", i, err)
		}
		all = append(all, evs...)
		w.clock = w.clock.Add(30 * time.Second)
	}
	var lent int64
	for _, e := range all {
		if e.Kind == "LEND_REACTIVE" {
			lent += e.Amount
		}
	}
	m, err := w.rs.PoolModel(w.ctx, "llm", w.per, pools.Layout{Lines: []pools.LineLayout{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if lent != 10_000 || m.Lines["a"].Buffer != 10_000 {
		t.Fatalf("lent %d, buffer of a %d; events %+v", lent, m.Lines["a"].Buffer, all)
	}
	evs, err := w.db.PoolEvents(w.ctx, "llm", 10)
	if err != nil || len(evs) == 0 || evs[0].Kind != "LEND_REACTIVE" {
		t.Fatalf("recorded events %+v %v", evs, err)
	}
}

func TestElasticityOffAndTheLockKeepTheWorldStill(t *testing.T) {
	w := newWorld(t, pools.ElasticityOff)
	r := w.runner()
	for _, amount := range []int64{1, 100, 100, 6000} {
		w.use(t, "a", amount)
		if evs, err := r.Tick(w.ctx, w.pol); err != nil || len(evs) != 0 {
			t.Fatalf("OFF made moves: %+v %v", evs, err)
		}
		w.clock = w.clock.Add(30 * time.Second)
	}

	w2 := newWorld(t, pools.ElasticityReactive)
	tok, err := w2.rs.TryLock(w2.ctx, "llm", poolctl.LockName, time.Minute)
	if err != nil || tok == "" {
		t.Fatalf("lock: %q %v", tok, err)
	}
	r2 := w2.runner()
	for _, amount := range []int64{1, 100, 100, 6000} {
		w2.use(t, "a", amount)
		if evs, err := r2.Tick(w2.ctx, w2.pol); err != nil || len(evs) != 0 {
			t.Fatalf("ran without the lock: %+v %v", evs, err)
		}
		w2.clock = w2.clock.Add(30 * time.Second)
	}
}

// burst drives line a into a reactive release of the whole buffer.
func (w *world) burst(t *testing.T, r *poolctl.Runner) {
	t.Helper()
	for i, amount := range []int64{1, 100, 100, 6000} {
		w.use(t, "a", amount)
		if _, err := r.Tick(w.ctx, w.pol); err != nil {
			t.Fatalf("tick %d: %v", i, err)
		}
		w.clock = w.clock.Add(30 * time.Second)
	}
}

func (w *world) model(t *testing.T) *pools.Model {
	t.Helper()
	m, err := w.rs.PoolModel(w.ctx, "llm", w.per, pools.Layout{Lines: []pools.LineLayout{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type moved struct{ Watermark, Lent, Reclaimed, Buffer int64 }

func movesOf(m *pools.Model) map[string]moved {
	out := map[string]moved{"": {Buffer: m.SharedBuffer}}
	for n, l := range m.Lines {
		out[n] = moved{l.Watermark, l.Lent, l.Reclaimed, l.Buffer}
	}
	return out
}

// TestMovesComeBackAfterRedisLoss: buffer lent by the controller and by an
// operator, a watermark the controller set and an executed reclaim are
// rebuilt from the policy store when Redis loses the layout.
func TestMovesComeBackAfterRedisLoss(t *testing.T) {
	w := newWorld(t, pools.ElasticityReactive)
	w.burst(t, w.runner())
	admin := poolctl.NewAdmin(w.db, w.rs, sched{w.per}, func() time.Time { return w.clock })
	for _, mv := range []pools.Move{{Op: "watermark", Line: "b", Amount: 7000}, {Op: "reclaim", Line: "b", To: "a", Amount: 2000}} {
		if _, _, err := w.rs.MovePools(w.ctx, "llm", w.per, mv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.db.RecordPoolEvents(w.ctx, "llm", []pools.Event{{AtMs: 1, Kind: "WATERMARK_LOWERED", Line: "b", Amount: 7500},
		{AtMs: 2, Kind: "WATERMARK_DECAYED", Line: "b", Amount: 7000}}); err != nil {
		t.Fatal(err)
	}
	if err := w.db.PutReclaim(w.ctx, "llm", pools.Reclaim{ID: "r1", From: "b", To: "a", Amount: 2000, State: pools.ReclaimExecuted, WarnedMs: 1, UpdateMs: 2}); err != nil {
		t.Fatal(err)
	}
	before := movesOf(w.model(t))
	if before["a"].Buffer != 10_000 || before["b"].Watermark != 7000 || before["a"].Reclaimed != 2000 {
		t.Fatalf("the scenario did not move: %+v", before)
	}
	w.mr.FlushAll()
	if err := admin.Relayout(w.ctx, "llm"); err != nil {
		t.Fatal(err)
	}
	if after := movesOf(w.model(t)); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the loss %+v, before %+v", after, before)
	}
	// A layout that Redis still has keeps its live moves: no rebuild.
	if _, _, err := w.rs.MovePools(w.ctx, "llm", w.per, pools.Move{Op: "watermark", Line: "b", Amount: 8000}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Relayout(w.ctx, "llm"); err != nil {
		t.Fatal(err)
	}
	if got := w.model(t).Lines["b"].Watermark; got != 8000 {
		t.Fatalf("relayout replaced a live watermark: %d", got)
	}
}

// TestAnotherInstanceTakesOverTheController: the controller's lock is kept
// from tick to tick (one instance decides while it lives); when it goes,
// the next instance adopts the buffer the first lent and gives it back
// after the peak.
func TestAnotherInstanceTakesOverTheController(t *testing.T) {
	w := newWorld(t, pools.ElasticityReactive)
	r1, r2 := w.runner(), w.runner()
	w.burst(t, r1)
	if tok, err := w.rs.TryLock(w.ctx, "llm", poolctl.LockName, time.Minute); err != nil || tok != "" {
		t.Fatalf("the controller's lock is free between ticks: %q %v", tok, err)
	}
	if evs, err := r2.Tick(w.ctx, w.pol); err != nil || len(evs) != 0 {
		t.Fatalf("a second instance decided while the first holds the lock: %+v %v", evs, err)
	}
	if got := w.model(t).Lines["a"].Buffer; got != 10_000 {
		t.Fatalf("buffer of a after the burst: %d", got)
	}
	r1.Release(w.ctx) // the first instance stops
	var returned int64
	for i := 0; i < 40 && w.model(t).Lines["a"].Buffer > 0; i++ {
		evs, err := r2.Tick(w.ctx, w.pol)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == "RETURN" && e.Line == "a" {
				returned += e.Amount
			}
		}
		w.clock = w.clock.Add(10 * time.Second)
	}
	if returned != 10_000 || w.model(t).Lines["a"].Buffer != 0 {
		t.Fatalf("the new holder returned %d; buffer of a %d", returned, w.model(t).Lines["a"].Buffer)
	}
}

// breaker is a quota.Breaker that is open (refuses every call) or counts
// the outcomes of the calls it lets through.
type breaker struct {
	open  bool
	calls int
	fails int
}

var errOpen = fmt.Errorf("breaker open: %w", quota.ErrUnavailable)

func (b *breaker) Allow() (func(error), error) {
	if b.open {
		return nil, errOpen
	}
	return func(err error) {
		b.calls++
		if err != nil {
			b.fails++
		}
	}, nil
}

// TestPoolCallsGoThroughTheBreakers: the admin surface and the controller
// call MySQL and Redis through the backend breakers (poolctl.Guarded): an
// open breaker refuses the call before it reaches the store, and every call
// let through is counted by the breaker of its backend.
func TestPoolCallsGoThroughTheBreakers(t *testing.T) {
	w := newWorld(t, pools.ElasticityReactive)
	ledger, redis := &breaker{}, &breaker{}
	gl, gs := poolctl.Guarded(w.db, w.rs, quota.Breakers{Ledger: ledger, Balances: redis})
	admin := poolctl.NewAdmin(gl, gs, sched{w.per}, func() time.Time { return w.clock })
	if _, _, err := admin.Status(w.ctx, "llm"); err != nil {
		t.Fatal(err)
	}
	if ledger.calls == 0 || redis.calls == 0 {
		t.Fatalf("calls counted: MySQL %d, Redis %d", ledger.calls, redis.calls)
	}
	r := poolctl.New(gl, gs, gl, sched{w.per}, zap.NewNop(), prometheus.NewRegistry(), 0, func() time.Time { return w.clock })
	before := redis.calls
	if _, err := r.Tick(w.ctx, w.pol); err != nil || redis.calls == before {
		t.Fatalf("controller tick: %v, Redis calls %d → %d", err, before, redis.calls)
	}
	ledger.open = true
	if _, _, err := admin.PutLine(w.ctx, "llm", pools.LineSpec{Name: "c", Tier: pools.TierCore, Weight: 1}); !errors.Is(err, errOpen) {
		t.Fatalf("put line with the MySQL breaker open: %v", err)
	}
	if lines, err := w.db.Lines(w.ctx, "llm"); err != nil || len(lines) != 2 {
		t.Fatalf("lines after the refused call: %+v %v", lines, err)
	}
	ledger.open, redis.open = false, true
	if _, err := admin.Release(w.ctx, "llm", poolctl.GrantRequest{Amount: 10, Line: "a", Reason: "x"}); !errors.Is(err, errOpen) {
		t.Fatalf("release with the Redis breaker open: %v", err)
	}
	if m := w.model(t); m.Lines["a"].Buffer != 0 {
		t.Fatalf("buffer moved with the Redis breaker open: %d", m.Lines["a"].Buffer)
	}
	r.Release(w.ctx)
}
