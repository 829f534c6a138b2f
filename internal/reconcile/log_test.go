package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// movingStore is a Redis store whose balance reads as one more reserved
// token on every read: the stores look as if requests were in flight, so a
// pass measures drift but must not correct it.
type movingStore struct {
	*redisstore.Store
	reads int64
}

func (m *movingStore) Balance(ctx context.Context, resource string, per quota.Period) (quota.Balance, error) {
	b, err := m.Store.Balance(ctx, resource, per)
	m.reads++
	b.Reserved += m.reads
	return b, err
}

// "reconcile repaired drift" is logged only when the pass repaired
// something (issue 11 §3.4): a drift that moved between the two reads is
// logged as seen, not repaired, and a real repair still logs the warning.
func TestRepairedDriftIsLoggedOnlyWhenSomethingWasRepaired(t *testing.T) {
	ctx := context.Background()
	const res = "logged"
	ledger, mr, store, sched := oneSessionWorld(t, res)

	pass := func(st reconcile.Store) (reconcile.Report, []observer.LoggedEntry) {
		t.Helper()
		core, logs := observer.New(zapcore.DebugLevel)
		rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, st, ledger, ledger, sched, zap.New(core), prometheus.NewRegistry())
		rep, err := rec.Resource(ctx, res)
		if err != nil {
			t.Fatal(err)
		}
		return rep, logs.FilterMessage("reconcile repaired drift").All()
	}

	rep, warned := pass(&movingStore{Store: store})
	if rep.DriftReserved == 0 || rep.BalanceAdjusted || len(warned) != 0 {
		t.Fatalf("moving stores: report %+v, %d \"repaired\" warnings; want drift seen, nothing adjusted, no warning", rep, len(warned))
	}
	if rep, warned = pass(store); rep.DriftReserved != 0 || len(warned) != 0 {
		t.Fatalf("agreeing stores: report %+v, %d \"repaired\" warnings", rep, len(warned))
	}
	mr.HSet(fmt.Sprintf("qc:{%s}:b:%d", res, rep.PeriodStart.UnixMilli()), "reserved", "9") // a real drift: +4
	if rep, warned = pass(store); !rep.BalanceAdjusted || len(warned) != 1 {
		t.Fatalf("real drift: report %+v, %d \"repaired\" warnings; want adjusted and one warning", rep, len(warned))
	}
}
