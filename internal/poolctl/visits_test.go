package poolctl_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Issue 23 §1: with Visits, a resource whose controller is at rest (its
// lines used nothing for four samples, nothing lent, watermarks at their
// tier's) costs no Redis command per tick until it changes; a use makes it
// due at the next tick, and it comes to rest again; a visit older than the
// full-visit interval is made with no change.
func TestControllerAtRestCostsNoCommandPerTick(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityReactive)
	rdb := redis.NewClient(&redis.Options{Addr: w.MR.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	tr := activity.New(rdb, activity.Options{Now: w.Now})
	w.RS.OnChange(tr.Mutated)
	st := &testenv.CountingStore{Store: w.RS}
	r := poolctl.New(w.DB, st, w.DB, w, zap.NewNop(), prometheus.NewRegistry(), 0, w.Now)
	full := 10 * time.Minute
	r.Visits = tr.NewVisits(full)
	tick := func() bool {
		w.Clock = w.Clock.Add(10 * time.Second)
		before := st.Calls
		r.TickAll(w.Ctx)
		return st.Calls > before
	}
	untilRest := func(what string) {
		t.Helper()
		for i := 0; i < 20; i++ {
			if !tick() {
				for j := 0; j < 10; j++ {
					if tick() {
						t.Fatalf("%s: tick %d after the first skipped one reached Redis", what, j+1)
					}
				}
				return
			}
		}
		t.Fatalf("%s: the controller never came to rest in 20 ticks", what)
	}
	untilRest("a world nothing uses")
	w.Use(t, "a", 100)
	if !tick() {
		t.Fatal("the tick after a use skipped the resource")
	}
	untilRest("after the use")
	w.Clock = w.Clock.Add(full)
	if !tick() {
		t.Fatal("past the full-visit interval: skipped")
	}
}
