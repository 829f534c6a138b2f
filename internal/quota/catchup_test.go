//go:build !mutation

package quota_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// inFlightLedger is the SQLite ledger with one write held back until just
// after the next rebuild's snapshot: the ledger write of a request that was
// in flight while Redis lost its state.
type inFlightLedger struct {
	*mysqlstore.Store
	mu     sync.Mutex
	before func(ctx context.Context) // runs once, right before the next SeedSnapshot, with its context
	after  func()                    // runs once, right after the next SeedSnapshot
}

func (l *inFlightLedger) SeedSnapshot(ctx context.Context, r string, start time.Time) (quota.PeriodTotals, []quota.UsageRecord, error) {
	l.mu.Lock()
	b := l.before
	l.before = nil
	l.mu.Unlock()
	if b != nil {
		b(ctx)
	}
	t, open, err := l.Store.SeedSnapshot(ctx, r, start)
	l.mu.Lock()
	f := l.after
	l.after = nil
	l.mu.Unlock()
	if f != nil {
		f()
	}
	return t, open, err
}

type g7Env struct {
	mr     *miniredis.Miniredis
	store  *redisstore.Store
	ledger *inFlightLedger
	svc    *quota.Service
	done   chan error // each catch-up's end
}

func newG7Env(t *testing.T) *g7Env {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := mysqlstore.OpenSQLite(context.Background(), ":memory:", mysqlstore.Options{BatchMaxWait: time.Microsecond})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	l := &inFlightLedger{Store: st}
	rs := redisstore.New(rdb)
	done := make(chan error, 8)
	svc := quota.NewService(rs, l, st, &period.Scheduler{}, quota.Options{
		CatchUpAfter: 10 * time.Millisecond,
		OnCatchUp:    func(_ string, err error) { done <- err },
	})
	if _, _, err := svc.PutPolicy(context.Background(), quota.Policy{ResourceName: "g7", QuotaType: quota.TypeTokens, TotalLimit: 100}); err != nil {
		t.Fatal(err)
	}
	return &g7Env{mr: mr, store: rs, ledger: l, svc: svc, done: done}
}

// caughtUp waits for the next catch-up to end and fails on its error.
func (e *g7Env) caughtUp(t *testing.T) {
	t.Helper()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("catch-up: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no catch-up within 10s of the rebuild")
	}
}

func (e *g7Env) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := e.ledger.DB().Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (e *g7Env) status(t *testing.T) quota.StatusResponse {
	t.Helper()
	st, err := e.svc.Status(t.Context(), "g7")
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// waitStatus polls the status until want holds (the catch-up runs in the
// background, CatchUpAfter after the rebuild).
func (e *g7Env) waitStatus(t *testing.T, what string, want func(quota.StatusResponse) bool) quota.StatusResponse {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.status(t)
		if want(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status used %d reserved %d active %d", what, st.Used, st.Reserved, st.ActiveSessions)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *g7Env) apply(t *testing.T, id string, amount int64) {
	t.Helper()
	if r, err := e.svc.Apply(t.Context(), quota.ApplyRequest{ResourceName: "g7", SessionID: id, Amount: amount}); err != nil || r.Granted != amount {
		t.Fatalf("apply %s: %+v, %v", id, r, err)
	}
}

// Known gap G7, the apply half: Redis lost its state while an apply's row
// was on its way to the ledger; the rebuild read the ledger before the row
// landed, so the rebuilt balance did not count the grant (the limit could be
// exceeded by it until reconciliation) and its session was not restored.
// The catch-up after the rebuild counts it, once.
func TestTheRebuildCatchesUpWithAnApplyWhoseRowLandedAfterItsRead(t *testing.T) {
	e := newG7Env(t)
	e.apply(t, "kept", 10)
	e.apply(t, "late", 30)
	e.caughtUp(t) // the first seed's, before Redis loses its state
	e.exec(t, "CREATE TABLE held AS SELECT * FROM quota_usage WHERE session_id = 'late'")
	e.exec(t, "DELETE FROM quota_usage WHERE session_id = 'late'")
	e.ledger.after = func() { e.exec(t, "INSERT INTO quota_usage SELECT * FROM held") }
	e.mr.FlushAll() // Redis restarted empty

	e.status(t) // the rebuild
	e.caughtUp(t)
	st := e.waitStatus(t, "the late row counted", func(s quota.StatusResponse) bool { return s.Reserved == 40 })
	if st.ActiveSessions != 2 || st.Used != 0 {
		t.Fatalf("after the catch-up: %+v, want both sessions back", st)
	}
	// Counted once: the session finishes as any other.
	if f, err := e.svc.Finish(t.Context(), quota.FinishRequest{ResourceName: "g7", SessionID: "late", Actual: 5}); err != nil || f.Charged != 5 {
		t.Fatalf("finish of the late session: %+v, %v", f, err)
	}
	if st := e.status(t); st.Reserved != 10 || st.Used != 5 {
		t.Fatalf("after its finish: used %d reserved %d, want 5 and 10", st.Used, st.Reserved)
	}
}

// Known gap G7, the finish half: a finish settled Redis, then Redis lost
// its state before the finish's ledger update landed; the rebuild read the
// row still USING and brought the session back USING with its grant
// reserved (a "ghost": reserved too high, and its lease would be swept and
// charged in full). The catch-up settles it as the ledger did.
func TestTheRebuildCatchesUpWithAFinishWhoseRowLandedAfterItsRead(t *testing.T) {
	e := newG7Env(t)
	e.apply(t, "ghost", 30)
	e.caughtUp(t)
	if _, err := e.svc.Finish(t.Context(), quota.FinishRequest{ResourceName: "g7", SessionID: "ghost", Actual: 12}); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "CREATE TABLE held AS SELECT * FROM quota_usage WHERE session_id = 'ghost'")
	e.exec(t, "UPDATE quota_usage SET status = 'USING', charged_amount = granted_amount, refunded_amount = 0, end_ms = NULL WHERE session_id = 'ghost'")
	e.ledger.after = func() {
		e.exec(t, "DELETE FROM quota_usage WHERE session_id = 'ghost'")
		e.exec(t, "INSERT INTO quota_usage SELECT * FROM held")
	}
	e.mr.FlushAll()

	e.status(t) // the rebuild
	e.caughtUp(t)
	st := e.waitStatus(t, "the ghost settled", func(s quota.StatusResponse) bool { return s.Reserved == 0 })
	if st.Used != 12 || st.ActiveSessions != 0 {
		t.Fatalf("after the catch-up: used %d active %d, want 12 and 0", st.Used, st.ActiveSessions)
	}
}

// The same finish, when Redis kept the session and only the balance was
// rebuilt (the repair after a failover drops it): the rebuild sees the
// session FINISHED in Redis and counts it so at once.
func TestARebuildCountsAFinishRedisHasAndTheLedgerNotYet(t *testing.T) {
	e := newG7Env(t)
	e.apply(t, "ahead", 30)
	e.caughtUp(t)
	if _, err := e.svc.Finish(t.Context(), quota.FinishRequest{ResourceName: "g7", SessionID: "ahead", Actual: 12}); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "UPDATE quota_usage SET status = 'USING', charged_amount = granted_amount, refunded_amount = 0, end_ms = NULL WHERE session_id = 'ahead'")
	per := e.status(t).Period
	if err := e.store.DropBalance(t.Context(), "g7", per, quota.Fence{}); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t); st.Reserved != 0 || st.Used != 12 {
		t.Fatalf("rebuilt: used %d reserved %d, want 12 and 0", st.Used, st.Reserved)
	}
	e.caughtUp(t) // changes nothing more, when the ledger's row lands or not
	if st := e.status(t); st.Reserved != 0 || st.Used != 12 {
		t.Fatalf("after the catch-up: used %d reserved %d, want 12 and 0", st.Used, st.Reserved)
	}
}
