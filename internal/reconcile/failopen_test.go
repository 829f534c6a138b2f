package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// TestFailOpenGrantsAreRecordedAndCountedAfterReconciliation runs the real
// adapters: a SQLite ledger, and Redis first unreachable, then back.
func TestFailOpenGrantsAreRecordedAndCountedAfterReconciliation(t *testing.T) {
	ctx := context.Background()
	ledger := newLedger(t, mysqlstore.Options{})
	sched := &period.Scheduler{}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	down := quota.NewService(redisstore.New(dead), ledger, ledger, sched, noCatchUp)

	for _, p := range []quota.Policy{
		{ResourceName: "open", QuotaType: quota.TypeTokens, TotalLimit: 1000, FailMode: quota.FailOpen, LeakThresholdSeconds: 300, Timezone: "UTC"},
		{ResourceName: "closed", QuotaType: quota.TypeTokens, TotalLimit: 1000, LeakThresholdSeconds: 300, Timezone: "UTC"},
	} {
		if _, _, err := ledger.PutPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	res, err := down.Apply(ctx, quota.ApplyRequest{ResourceName: "open", Amount: 300, SessionID: "fo-1"})
	if err != nil || !res.FailOpen || !res.FailOpenRecorded || res.Granted != 300 || res.Remaining != -1 {
		t.Fatalf("fail-open apply: %+v, %v", res, err)
	}
	if _, err := down.Apply(ctx, quota.ApplyRequest{ResourceName: "closed", Amount: 300, SessionID: "fc-1"}); !errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("fail-closed apply: %v, want ErrUnavailable", err)
	}
	rows, err := ledger.SessionsByID(ctx, []string{"fo-1", "fc-1"})
	if err != nil || len(rows) != 1 || rows["fo-1"].Status != quota.StatusUsing || rows["fo-1"].GrantedAmount != 300 {
		t.Fatalf("ledger rows %+v, %v: want only the fail-open grant, USING", rows, err)
	}

	// Redis is back (empty). Reconciliation counts the fail-open grant.
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	up := quota.NewService(store, ledger, ledger, sched, noCatchUp)
	st, err := up.Status(ctx, "open") // seeds the period from the ledger
	if err != nil || st.Reserved != 300 || st.Remaining != 700 {
		t.Fatalf("status after Redis came back: %+v, %v", st, err)
	}
	rec := reconcile.New(reconcile.Config{Grace: time.Millisecond, Settle: time.Millisecond}, store, ledger, ledger, sched, zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, "open")
	if err != nil || rep.DriftReserved != 0 || rep.DriftCharged != 0 {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	fin, err := up.Finish(ctx, quota.FinishRequest{ResourceName: "open", SessionID: "fo-1", Actual: 120})
	if err != nil || fin.Refunded != 180 {
		t.Fatalf("finish of the fail-open session: %+v, %v", fin, err)
	}
	if st, _ := up.Status(ctx, "open"); st.Used != 120 || st.Reserved != 0 {
		t.Fatalf("status after finish: %+v", st)
	}
}

// flakyLedger is the real SQLite ledger with a switch that makes every
// ledger write and read fail as unreachable (policies stay readable).
type flakyLedger struct {
	*mysqlstore.Store
	down atomic.Bool
}

func (f *flakyLedger) InsertSession(ctx context.Context, rec quota.UsageRecord) error {
	if f.down.Load() {
		return fmt.Errorf("insert: %w", quota.ErrUnavailable)
	}
	return f.Store.InsertSession(ctx, rec)
}

func (f *flakyLedger) Session(ctx context.Context, id string) (quota.UsageRecord, error) {
	if f.down.Load() {
		return quota.UsageRecord{}, fmt.Errorf("session: %w", quota.ErrUnavailable)
	}
	return f.Store.Session(ctx, id)
}

// TestFailOpenGrantWhileOnlyMySQLIsDownIsCountedInRedisAndRecordedLater: the
// reservation Redis made is kept (counted live), and reconciliation writes
// the ledger row once MySQL answers; the session then finishes normally.
func TestFailOpenGrantWhileOnlyMySQLIsDownIsCountedInRedisAndRecordedLater(t *testing.T) {
	ctx := context.Background()
	st := newLedger(t, mysqlstore.Options{})
	ledger := &flakyLedger{Store: st}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	sched := &period.Scheduler{}
	svc := quota.NewService(store, ledger, st, sched, noCatchUp)
	if _, _, err := st.PutPolicy(ctx, quota.Policy{ResourceName: "open", QuotaType: quota.TypeTokens, TotalLimit: 1000,
		FailMode: quota.FailOpen, LeakThresholdSeconds: 300, Timezone: "UTC"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Status(ctx, "open"); err != nil { // seeds the period while MySQL is up
		t.Fatal(err)
	}

	ledger.down.Store(true)
	res, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: "open", Amount: 300, SessionID: "fo-redis"})
	if err != nil || !res.FailOpen || res.Granted != 300 || res.Remaining != 700 {
		t.Fatalf("fail-open apply with Redis up: %+v, %v", res, err)
	}
	if s, _ := svc.Status(ctx, "open"); s.Reserved != 300 {
		t.Fatalf("the grant must be counted live in Redis: %+v", s)
	}

	ledger.down.Store(false)
	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, store, ledger, st, sched, zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, "open")
	if err != nil || rep.FailOpenRecorded != 1 || rep.DriftReserved != 0 || rep.OrphansReleased != 0 {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	row, err := st.Session(ctx, "fo-redis")
	if err != nil || row.Status != quota.StatusUsing || row.GrantedAmount != 300 {
		t.Fatalf("ledger row after reconciliation: %+v, %v", row, err)
	}
	if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: "open", SessionID: "fo-redis", Actual: 50}); err != nil {
		t.Fatal(err)
	}
	if tot, _ := st.PeriodTotals(ctx, "open", row.PeriodStart); tot.Charged != 50 || tot.Reserved != 0 {
		t.Fatalf("ledger totals after finish: %+v", tot)
	}
}

// noCatchUp is the quota.Options of the services these tests apply with:
// no catch-up after a rebuild (quota catchup.go). A catch-up takes the
// resource's "reconcile" lock 5 s after the service seeded a balance, so
// a test whose set-up took that long on a loaded machine had its own
// reconcile pass skipped ("another instance is reconciling this
// resource"; TestFullPassRepairsEverySessionAcrossChunks failed so in CI
// once, after 5.6 s of applies under -race).
var noCatchUp = quota.Options{CatchUpAfter: -1}

// newLedger opens and migrates a SQLite ledger of the test's own, closed
// when the test ends.
func newLedger(t *testing.T, opts mysqlstore.Options) *mysqlstore.Store {
	t.Helper()
	st, err := mysqlstore.OpenSQLite(context.Background(), t.TempDir()+"/ledger.db", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}
