package reconcile_test

import (
	"context"
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

// docs/reliability.md G1: a USING row whose Redis session is a CANCELLED
// tombstone (its apply answered 503) is marked CANCELLED with nothing
// charged, so that a later loss of the tombstone cannot bring it back; and a
// Redis reservation whose row is CANCELLED (the give-back in Redis failed)
// is given back, never kept or charged.
func TestCancelledApplysRowIsSettledAndItsReservationGivenBack(t *testing.T) {
	ctx := context.Background()
	ledger := newLedger(t, mysqlstore.Options{BatchMaxWait: -1})
	const res = "cancelled"
	if _, _, err := ledger.PutPolicy(ctx, quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 1000,
		LeakThresholdSeconds: 3600, Timezone: "UTC"}); err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	sched := &period.Scheduler{}
	svc := quota.NewService(store, ledger, ledger, sched, noCatchUp)
	for _, id := range []string{"tombstoned", "row-cancelled"} {
		if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: res, Amount: 100, SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// "tombstoned": its reservation was given back in Redis, its row left
	// USING. "row-cancelled": its row marked CANCELLED, its reservation kept.
	if err := store.Cancel(ctx, res, "tombstoned"); err != nil {
		t.Fatal(err)
	}
	row, err := ledger.Session(ctx, "row-cancelled")
	if err != nil {
		t.Fatal(err)
	}
	row.EndTime = row.StartTime
	if err := ledger.CancelSession(ctx, row); err != nil {
		t.Fatal(err)
	}

	rec := reconcile.New(reconcile.Config{Grace: time.Nanosecond, Settle: time.Millisecond}, store, ledger, ledger, sched,
		zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if rep.LedgerRowsSettled != 1 || rep.OrphansReleased != 1 {
		t.Fatalf("report %+v: want the tombstoned row settled and the CANCELLED row's reservation given back", rep)
	}
	for _, id := range []string{"tombstoned", "row-cancelled"} {
		r, err := ledger.Session(ctx, id)
		if err != nil || r.Status != quota.StatusCancelled || r.ChargedAmount != 0 || r.RefundedAmount != 100 {
			t.Fatalf("row %s: %+v %v, want CANCELLED with nothing charged", id, r, err)
		}
	}
	st, err := svc.Status(ctx, res)
	if err != nil || st.Used != 0 || st.Reserved != 0 {
		t.Fatalf("status %+v %v: want nothing used or reserved", st, err)
	}
	// Redis loses everything: the rebuild counts neither.
	mr.FlushAll()
	if st, err = svc.Status(ctx, res); err != nil || st.Used != 0 || st.Reserved != 0 || st.Remaining != 1000 {
		t.Fatalf("status after the rebuild %+v %v: want the whole limit", st, err)
	}
}
