package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// A full pass over more open sessions than one chunk (checkChunk, 500)
// repairs every one of them: 1,100 ledger rows left USING after their
// finish reached only Redis, and 600 sessions Redis lost.
func TestFullPassRepairsEverySessionAcrossChunks(t *testing.T) {
	ctx := context.Background()
	ledger := newLedger(t, mysqlstore.Options{BatchMaxWait: -1})
	const res, settled, lost = "chunked", 1100, 600
	if _, _, err := ledger.PutPolicy(ctx, quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 1 << 40, LeakThresholdSeconds: 3600, Timezone: "UTC"}); err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	sched := &period.Scheduler{}
	svc := quota.NewService(store, ledger, ledger, sched, noCatchUp)

	id := func(i int) string { return fmt.Sprintf("s-%04d", i) }
	// Seed the period first, and apply from a few workers: 1,700 applies
	// at once on a cold balance queue the seeding lock behind them for the
	// client's pool, which fails them on a loaded machine.
	if _, err := svc.Status(ctx, res); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, settled+lost)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: res, Amount: 2, SessionID: id(i)}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range settled + lost {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The first 1,100 finish in Redis only (their ledger update was lost);
	// the other 600 vanish from Redis.
	for i := range settled {
		if _, err := store.Finish(ctx, quota.FinishCmd{ResourceName: res, SessionID: id(i), Actual: 1, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for i := settled; i < settled+lost; i++ {
		mr.Del("qc:{" + res + "}:s:" + id(i))
	}

	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, store, ledger, ledger, sched, zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if rep.LedgerRowsSettled != settled || rep.SessionsRestored != lost {
		t.Fatalf("report %+v: want %d rows settled and %d sessions restored", rep, settled, lost)
	}
	ids := make([]string, settled+lost)
	for i := range ids {
		ids[i] = id(i)
	}
	rows, err := ledger.SessionsByID(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, sid := range ids {
		want := quota.StatusFinished
		if i >= settled {
			want = quota.StatusUsing
		}
		if got := rows[sid]; got.Status != want || (want == quota.StatusFinished && got.ChargedAmount != 1) {
			t.Fatalf("row %s: %+v, want %s", sid, got, want)
		}
	}
	for i := settled; i < settled+lost; i++ {
		if _, err := svc.Heartbeat(ctx, res, id(i), ""); err != nil {
			t.Fatalf("heartbeat of restored %s: %v", id(i), err)
		}
	}
}
