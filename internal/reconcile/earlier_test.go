package reconcile_test

import (
	"context"
	"fmt"
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

// Known gap G5: reconciliation repaired only the current period, so a drift
// left in the previous one (still in Redis for late finishes) stayed. A full
// pass now corrects a stable drift of the previous period too.
func TestFullPassRepairsThePreviousPeriodsDrift(t *testing.T) {
	ctx := context.Background()
	ledger := newLedger(t, mysqlstore.Options{})
	const res = "earlier"
	if _, _, err := ledger.PutPolicy(ctx, quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 1000,
		ResetCron: "0 * * * *", LeakThresholdSeconds: 3600, Timezone: "UTC"}); err != nil {
		t.Fatal(err)
	}
	// Created three hours ago: the current hour's period has one before it.
	if _, err := ledger.DB().Exec(`UPDATE quota_policy SET created_ms = created_ms - 10800000 WHERE resource_name = ?`, res); err != nil {
		t.Fatal(err)
	}
	pol, err := ledger.GetPolicy(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	sched := &period.Scheduler{}
	cur, err := sched.PeriodAt(pol, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	prev, err := sched.PeriodAt(pol, cur.Start.Add(-time.Millisecond))
	if err != nil || !prev.Start.Before(cur.Start) {
		t.Fatalf("previous period %+v, %v", prev, err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	for _, per := range []quota.Period{prev, cur} {
		if _, err := store.Seed(ctx, res, per, 1000, quota.PeriodTotals{}, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// An orphan swept after the previous period ended: charged in Redis, in
	// no ledger row.
	mr.HSet(fmt.Sprintf("qc:{%s}:b:%d", res, prev.ID()), "charged", "7")

	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, store, ledger, ledger, sched, zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.Balance(ctx, res, prev)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.EarlierPeriodAdjusted || b.Charged != 0 {
		t.Fatalf("report %+v, previous period charged %d: want the drift of 7 corrected", rep, b.Charged)
	}
	// The current period agreed all along and is left alone.
	if rep.BalanceAdjusted || rep.DriftCharged != 0 {
		t.Fatalf("report %+v: the current period had no drift", rep)
	}
}
