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
	"github.com/quotacenter/quota-center/internal/sweeper"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// overgrantWorld is a resource on a Redis and a ledger: real Redis and
// MariaDB ("real"), or miniredis and SQLite ("dev").
type overgrantWorld struct {
	res    string
	rdb    redis.UniversalClient
	store  *redisstore.Store
	ledger *mysqlstore.Store
}

func newOvergrantWorld(t *testing.T, mode string) overgrantWorld {
	t.Helper()
	w := overgrantWorld{res: testenv.Resource(t)}
	switch mode {
	case "real":
		w.rdb = redis.NewClient(&redis.Options{Addr: testenv.MustRedis(t)})
		st, err := mysqlstore.Open(context.Background(), testenv.MustMySQL(t), mysqlstore.Options{BatchMaxWait: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.ledger = st
	default:
		w.rdb = redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		w.ledger = newLedger(t, mysqlstore.Options{BatchMaxWait: -1})
	}
	t.Cleanup(func() { _ = w.rdb.Close() })
	w.store = redisstore.New(w.rdb)
	return w
}

// Issue 22 §1: an apply answered 503 left its reservation in Redis (no
// ledger row: its instance was killed before Redis resumed). A reconcile
// pass while that reservation was younger than the grace period counted
// it as drift and subtracted it; the sweeper then gave the same amount
// back again when the lease ran out. Reserved reached −335, and an apply of
// 1300 against a limit of 1000 was granted.
//
// Every give-back is once per reservation: reconciliation leaves a
// reservation a live session still holds to that session's own give-back.
func TestAYoungLeftoverReservationIsGivenBackOnceByReconcileAndSweep(t *testing.T) {
	for _, mode := range []string{"real", "dev"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			w := newOvergrantWorld(t, mode)
			pol, _, err := w.ledger.PutPolicy(ctx, quota.Policy{ResourceName: w.res, QuotaType: quota.TypeTokens,
				TotalLimit: 1000, LeakThresholdSeconds: 60, Timezone: "UTC"})
			if err != nil {
				t.Fatal(err)
			}
			sched := &period.Scheduler{}
			svc := quota.NewService(w.store, w.ledger, w.ledger, sched, noCatchUp)
			// One recorded session, finished: the balance is seeded and agrees
			// with the ledger (charged 10).
			if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: w.res, Amount: 10, SessionID: "recorded"}); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: w.res, SessionID: "recorded", Actual: 10}); err != nil {
				t.Fatal(err)
			}
			// The leftover: apply.lua ran (Redis resumed after the caller's
			// 503); nobody wrote its ledger row nor gave it back.
			per, err := sched.PeriodAt(pol, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			r, err := w.store.Apply(ctx, quota.ApplyCmd{ResourceName: w.res, SessionID: "leftover", Amount: 335,
				Period: per, Lease: pol.LeaseDuration(), Attempt: "killed"})
			if err != nil || r.Outcome != quota.ApplyGranted {
				t.Fatalf("leftover apply: %+v %v", r, err)
			}

			// A manual reconcile right after the incident: the leftover is
			// younger than the grace period.
			rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, w.store, w.ledger, w.ledger,
				sched, zap.NewNop(), prometheus.NewRegistry())
			rep, err := rec.Resource(ctx, w.res)
			if err != nil {
				t.Fatal(err)
			}
			w.wantBalance(t, per, 10, 335, "after the reconcile pass (report %+v)", rep)
			if rep.BalanceAdjusted || rep.AdjustRefused != "held" || rep.DriftReserved != 335 {
				t.Fatalf("report %+v: want the drift of 335 measured and left to the leftover's own give-back", rep)
			}

			// Its lease runs out; the sweeper gives back the orphan.
			leaseKey, sessKey := "qc:{"+w.res+"}:leases", "qc:{"+w.res+"}:s:leftover"
			past := time.Now().Add(-time.Minute).UnixMilli()
			if err := w.rdb.ZAdd(ctx, leaseKey, redis.Z{Score: float64(past), Member: "leftover"}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := w.rdb.HSet(ctx, sessKey, "lease", past).Err(); err != nil {
				t.Fatal(err)
			}
			sw := sweeper.New(sweeper.Config{OrphanGrace: time.Nanosecond, Retention: time.Hour}, w.ledger, w.store, w.ledger,
				zap.NewNop(), prometheus.NewRegistry())
			sw.SweepOnce(ctx)
			w.wantBalance(t, per, 10, 0, "after the sweep")
			// 1300 against a limit of 1000 (10 used) is refused.
			resp, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: w.res, Amount: 1300, SessionID: "too-much"})
			if err != nil || !resp.Refused() || resp.Remaining != 990 {
				t.Fatalf("apply of 1300: %+v %v, want refused with 990 remaining", resp, err)
			}

			// Another pass once the grace period is over, and another sweep:
			// nothing is left to give back.
			rec = reconcile.New(reconcile.Config{Grace: time.Nanosecond, Settle: time.Millisecond}, w.store, w.ledger, w.ledger,
				sched, zap.NewNop(), prometheus.NewRegistry())
			if rep, err = rec.Resource(ctx, w.res); err != nil {
				t.Fatal(err)
			}
			sw.SweepOnce(ctx)
			w.wantBalance(t, per, 10, 0, "after a second pass and sweep (report %+v)", rep)

		})
	}
}

// wantBalance fails the test unless per's balance is charged and reserved
// (neither ever negative).
func (w overgrantWorld) wantBalance(t *testing.T, per quota.Period, charged, reserved int64, what string, args ...any) {
	t.Helper()
	b, err := w.store.Balance(context.Background(), w.res, per)
	if err != nil {
		t.Fatal(err)
	}
	if b.Charged < 0 || b.Reserved < 0 || b.Charged != charged || b.Reserved != reserved {
		t.Fatalf("balance %+v "+what+": want charged %d, reserved %d", append(append([]any{b}, args...), charged, reserved)...)
	}
}

// landingLedger writes a row (the leftover's, landing late) the first time
// reconciliation looks sessions up by id.
type landingLedger struct {
	*mysqlstore.Store
	row    quota.UsageRecord
	landed bool
}

func (l *landingLedger) SessionsByID(ctx context.Context, ids []string) (map[string]quota.UsageRecord, error) {
	if !l.landed {
		l.landed = true
		if err := l.InsertSession(ctx, l.row); err != nil {
			return nil, err
		}
	}
	return l.Store.SessionsByID(ctx, ids)
}

// A ledger row that lands while the pass lists the unrecorded sessions
// (after its two quiet reads) changes the ledger's sums: the correction,
// measured without the row, is not written ("moved"), and the reservation
// stays, counted once (by the row now).
func TestARowLandingWhileTheUnrecordedSessionsAreListedStopsTheCorrection(t *testing.T) {
	ctx := context.Background()
	w := newOvergrantWorld(t, "dev")
	pol, _, err := w.ledger.PutPolicy(ctx, quota.Policy{ResourceName: w.res, QuotaType: quota.TypeTokens,
		TotalLimit: 1000, LeakThresholdSeconds: 60, Timezone: "UTC"})
	if err != nil {
		t.Fatal(err)
	}
	sched := &period.Scheduler{}
	svc := quota.NewService(w.store, w.ledger, w.ledger, sched, noCatchUp)
	if _, err := svc.Status(ctx, w.res); err != nil { // seeds the balance
		t.Fatal(err)
	}
	per, err := sched.PeriodAt(pol, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.store.Apply(ctx, quota.ApplyCmd{ResourceName: w.res, SessionID: "late-row", Amount: 335,
		Period: per, Lease: pol.LeaseDuration()})
	if err != nil || r.Outcome != quota.ApplyGranted {
		t.Fatalf("apply: %+v %v", r, err)
	}
	ledger := &landingLedger{Store: w.ledger, row: quota.UsageRecord{ResourceName: w.res, SessionID: "late-row",
		PeriodStart: per.Start, ApplyAmount: 335, GrantedAmount: 335, ChargedAmount: 335, StartTime: time.Now(),
		Status: quota.StatusUsing}}
	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, w.store, ledger, w.ledger,
		sched, zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, w.res)
	if err != nil {
		t.Fatal(err)
	}
	if !ledger.landed || rep.BalanceAdjusted || rep.AdjustRefused != "moved" {
		t.Fatalf("report %+v (row landed %v): want the correction refused as moved", rep, ledger.landed)
	}
	w.wantBalance(t, per, 0, 335, "after the pass")
	if rep, err = rec.Resource(ctx, w.res); err != nil || rep.DriftReserved != 0 || rep.BalanceAdjusted {
		t.Fatalf("next pass: %+v %v, want no drift", rep, err)
	}
	w.wantBalance(t, per, 0, 335, "after the next pass")
}

// More unrecorded live sessions than one correction may name: the
// correction waits (held) rather than take reservations it cannot check.
func TestTooManyUnrecordedSessionsHoldTheCorrection(t *testing.T) {
	ctx := context.Background()
	w := newOvergrantWorld(t, "dev")
	pol, _, err := w.ledger.PutPolicy(ctx, quota.Policy{ResourceName: w.res, QuotaType: quota.TypeTokens,
		TotalLimit: 5000, LeakThresholdSeconds: 60, Timezone: "UTC"})
	if err != nil {
		t.Fatal(err)
	}
	sched := &period.Scheduler{}
	if _, err := quota.NewService(w.store, w.ledger, w.ledger, sched, noCatchUp).Status(ctx, w.res); err != nil {
		t.Fatal(err)
	}
	per, err := sched.PeriodAt(pol, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const n = 1001 // one more than a correction names
	for i := range n {
		r, err := w.store.Apply(ctx, quota.ApplyCmd{ResourceName: w.res, SessionID: fmt.Sprintf("leftover-%d", i), Amount: 1,
			Period: per, Lease: pol.LeaseDuration()})
		if err != nil || r.Outcome != quota.ApplyGranted {
			t.Fatalf("apply %d: %+v %v", i, r, err)
		}
	}
	rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, w.store, w.ledger, w.ledger,
		sched, zap.NewNop(), prometheus.NewRegistry())
	rep, err := rec.Resource(ctx, w.res)
	if err != nil {
		t.Fatal(err)
	}
	if rep.BalanceAdjusted || rep.AdjustRefused != "held" || rep.DriftReserved != n {
		t.Fatalf("report %+v: want the drift of %d held", rep, n)
	}
	w.wantBalance(t, per, 0, n, "after the pass")
}
