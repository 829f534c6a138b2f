package poolctl_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

func runner(w *testenv.PoolWorld) *poolctl.Runner {
	return poolctl.New(w.DB, w.RS, w.DB, w, zap.NewNop(), prometheus.NewRegistry(), 0, w.Now)
}

func TestReactiveBurstLendsTheBufferAndIsRecorded(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityReactive)
	r := runner(w)
	var all []pools.Event
	for i, amount := range []int64{0, 100, 100, 6000} {
		w.Use(t, "a", max(amount, 1))
		evs, err := r.Tick(w.Ctx, w.Pol)
		if err != nil {
			t.Fatalf("tick %d: %v", i, err)
		}
		all = append(all, evs...)
		w.Clock = w.Clock.Add(30 * time.Second)
	}
	var lent int64
	for _, e := range all {
		if e.Kind == "LEND_REACTIVE" {
			lent += e.Amount
		}
	}
	m, err := w.RS.PoolModel(w.Ctx, "llm", w.Per, pools.Layout{Lines: []pools.LineLayout{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if lent != 10_000 || m.Lines["a"].Buffer != 10_000 {
		t.Fatalf("lent %d, buffer of a %d; events %+v", lent, m.Lines["a"].Buffer, all)
	}
	evs, err := w.DB.PoolEvents(w.Ctx, "llm", 10)
	if err != nil || len(evs) == 0 || evs[0].Kind != "LEND_REACTIVE" {
		t.Fatalf("recorded events %+v %v", evs, err)
	}
}

func TestElasticityOffAndTheLockKeepTheWorldStill(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	r := runner(w)
	for _, amount := range []int64{1, 100, 100, 6000} {
		w.Use(t, "a", amount)
		if evs, err := r.Tick(w.Ctx, w.Pol); err != nil || len(evs) != 0 {
			t.Fatalf("OFF made moves: %+v %v", evs, err)
		}
		w.Clock = w.Clock.Add(30 * time.Second)
	}

	w2 := testenv.NewPoolWorld(t, pools.ElasticityReactive)
	tok, err := w2.RS.TryLock(w2.Ctx, "llm", poolctl.LockName, time.Minute)
	if err != nil || tok == "" {
		t.Fatalf("lock: %q %v", tok, err)
	}
	r2 := runner(w2)
	for _, amount := range []int64{1, 100, 100, 6000} {
		w2.Use(t, "a", amount)
		if evs, err := r2.Tick(w2.Ctx, w2.Pol); err != nil || len(evs) != 0 {
			t.Fatalf("ran without the lock: %+v %v", evs, err)
		}
		w2.Clock = w2.Clock.Add(30 * time.Second)
	}
}

// burst drives line a into a reactive release of the whole buffer.
func burst(t *testing.T, w *testenv.PoolWorld, r *poolctl.Runner) {
	t.Helper()
	for i, amount := range []int64{1, 100, 100, 6000} {
		w.Use(t, "a", amount)
		if _, err := r.Tick(w.Ctx, w.Pol); err != nil {
			t.Fatalf("tick %d: %v", i, err)
		}
		w.Clock = w.Clock.Add(30 * time.Second)
	}
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
	w := testenv.NewPoolWorld(t, pools.ElasticityReactive)
	burst(t, w, runner(w))
	svc := w.Quota(quota.Breakers{})
	pa := admin.NewPools(w.DB, w.RS, svc, w, w.Now)
	// relayout is what the seed step does (quota.Service.WritePoolLayout):
	// the layout of the policy store, with the moves where Redis lost it.
	relayout := func() error {
		c, err := pa.Config(w.Ctx, "llm")
		if err != nil {
			return err
		}
		return svc.WritePoolLayout(w.Ctx, "llm", c.Layout)
	}
	for _, mv := range []pools.Move{{Op: "watermark", Line: "b", Amount: 7000}, {Op: "reclaim", Line: "b", To: "a", Amount: 2000}} {
		if _, _, err := w.RS.MovePools(w.Ctx, "llm", w.Per, mv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.DB.RecordPoolEvents(w.Ctx, "llm", []pools.Event{{AtMs: 1, Kind: "WATERMARK_LOWERED", Line: "b", Amount: 7500},
		{AtMs: 2, Kind: "WATERMARK_DECAYED", Line: "b", Amount: 7000}}); err != nil {
		t.Fatal(err)
	}
	if err := w.DB.PutReclaim(w.Ctx, "llm", pools.Reclaim{ID: "r1", From: "b", To: "a", Amount: 2000, State: pools.ReclaimExecuted, WarnedMs: 1, UpdateMs: 2}); err != nil {
		t.Fatal(err)
	}
	before := movesOf(w.Model(t))
	if before["a"].Buffer != 10_000 || before["b"].Watermark != 7000 || before["a"].Reclaimed != 2000 {
		t.Fatalf("the scenario did not move: %+v", before)
	}
	w.MR.FlushAll()
	if err := relayout(); err != nil {
		t.Fatal(err)
	}
	if after := movesOf(w.Model(t)); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the loss %+v, before %+v", after, before)
	}
	// A layout that Redis still has keeps its live moves: no rebuild.
	if _, _, err := w.RS.MovePools(w.Ctx, "llm", w.Per, pools.Move{Op: "watermark", Line: "b", Amount: 8000}); err != nil {
		t.Fatal(err)
	}
	if err := relayout(); err != nil {
		t.Fatal(err)
	}
	if got := w.Model(t).Lines["b"].Watermark; got != 8000 {
		t.Fatalf("relayout replaced a live watermark: %d", got)
	}
}

// TestAnotherInstanceTakesOverTheController: the controller's lock is kept
// from tick to tick (one instance decides while it lives); when it goes,
// the next instance adopts the buffer the first lent and gives it back
// after the peak.
func TestAnotherInstanceTakesOverTheController(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityReactive)
	r1, r2 := runner(w), runner(w)
	burst(t, w, r1)
	if tok, err := w.RS.TryLock(w.Ctx, "llm", poolctl.LockName, time.Minute); err != nil || tok != "" {
		t.Fatalf("the controller's lock is free between ticks: %q %v", tok, err)
	}
	if evs, err := r2.Tick(w.Ctx, w.Pol); err != nil || len(evs) != 0 {
		t.Fatalf("a second instance decided while the first holds the lock: %+v %v", evs, err)
	}
	if got := w.Model(t).Lines["a"].Buffer; got != 10_000 {
		t.Fatalf("buffer of a after the burst: %d", got)
	}
	r1.Release(w.Ctx) // the first instance stops
	var returned int64
	for i := 0; i < 40 && w.Model(t).Lines["a"].Buffer > 0; i++ {
		evs, err := r2.Tick(w.Ctx, w.Pol)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == "RETURN" && e.Line == "a" {
				returned += e.Amount
			}
		}
		w.Clock = w.Clock.Add(10 * time.Second)
	}
	if returned != 10_000 || w.Model(t).Lines["a"].Buffer != 0 {
		t.Fatalf("the new holder returned %d; buffer of a %d", returned, w.Model(t).Lines["a"].Buffer)
	}
}
