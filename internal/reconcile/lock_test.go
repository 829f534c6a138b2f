package reconcile_test

import (
	"context"
	"errors"
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

// lockStealingLedger is the SQLite ledger whose first read of open
// sessions happens while another instance takes the reconcile lock over
// (this pass was cut off past the lock's TTL): it waits until the pass's
// lock renewal has stopped the pass, then reads with the pass's context.
type lockStealingLedger struct {
	*mysqlstore.Store
	steal func(ctx context.Context) // runs once
}

func (l *lockStealingLedger) OpenSessionsPage(ctx context.Context, r string, after int64, limit int) ([]quota.UsageRecord, int64, error) {
	if f := l.steal; f != nil {
		l.steal = nil
		f(ctx)
	}
	return l.Store.OpenSessionsPage(ctx, r, after, limit)
}

// A pass whose reconcile lock is taken over while it reads the ledger is
// stopped by its renewal; the read cut short fails with context.Canceled,
// which is no backend failure: POST /admin/reconcile answered 500
// INTERNAL_ERROR. The pass ends with quota.ErrLockLost (503, retried), as
// when adjust.lua refuses its correction.
func TestAPassThatLosesItsLockMidReadEndsWithErrLockLost(t *testing.T) {
	ctx := context.Background()
	const res = "stolen"
	st, mr, store, sched := oneSessionWorld(t, res)
	stopped := false
	ledger := &lockStealingLedger{Store: st, steal: func(ctx context.Context) {
		if err := mr.Set("qc:{"+res+"}:lock:reconcile", "another-reconciler"); err != nil {
			t.Error(err)
		}
		<-ctx.Done()
		stopped = true
	}}
	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, store, ledger, st, sched, zap.NewNop(), prometheus.NewRegistry())
	_, err := rec.Resource(ctx, res)
	if !stopped {
		t.Fatal("the pass read open sessions before its lock was taken over: nothing reproduced")
	}
	if !errors.Is(err, quota.ErrLockLost) || quota.CodeOf(err) != quota.CodeBackendUnavailable {
		t.Fatalf("pass whose lock was lost mid-read: %v (code %s); want quota.ErrLockLost, BACKEND_UNAVAILABLE", err, quota.CodeOf(err))
	}
}

// oneSessionWorld is a SQLite ledger and a miniredis store holding one
// COUNT resource (limit 1000) with one open session of 5 ("s-1"), applied
// through a quota.Service.
func oneSessionWorld(t *testing.T, res string) (*mysqlstore.Store, *miniredis.Miniredis, *redisstore.Store, *period.Scheduler) {
	t.Helper()
	ctx := context.Background()
	ledger := newLedger(t, mysqlstore.Options{})
	if _, _, err := ledger.PutPolicy(ctx, quota.Policy{ResourceName: res, QuotaType: quota.TypeCount, TotalLimit: 1000, LeakThresholdSeconds: 3600, Timezone: "UTC"}); err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	sched := &period.Scheduler{}
	svc := quota.NewService(store, ledger, ledger, sched, noCatchUp)
	if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: res, Amount: 5, SessionID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	return ledger, mr, store, sched
}
