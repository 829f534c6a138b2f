package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestFailOpenSessionsWhoseIDsCollideAreAllRecorded (open finding A,
// docs/pools.md §5): fail-open sessions made while MySQL was down, whose
// ids are in the ledger already as earlier sessions of another resource or
// of another client on the same resource (which Redis no longer holds), are
// all recorded by reconciliation, under their scoped ids as the apply path
// would have stored them; their heartbeats and finishes still work, the
// earlier rows are untouched, and the ledger's totals equal what Redis
// charged. Before, reconciliation took the earlier rows for the sessions'
// own: their use was never written (the review lost 14 of 209 grants).
func TestFailOpenSessionsWhoseIDsCollideAreAllRecorded(t *testing.T) {
	for _, mode := range []string{"real", "dev"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			w := newOvergrantWorld(t, mode)
			other := testenv.Resource(t)
			ledger := &flakyLedger{Store: w.ledger}
			sched := &period.Scheduler{}
			svc := quota.NewService(w.store, ledger, w.ledger, sched, noCatchUp)
			for _, p := range []quota.Policy{
				{ResourceName: w.res, QuotaType: quota.TypeTokens, TotalLimit: 10000, FailMode: quota.FailOpen, LeakThresholdSeconds: 300, Timezone: "UTC"},
				{ResourceName: other, QuotaType: quota.TypeTokens, TotalLimit: 10000, LeakThresholdSeconds: 300, Timezone: "UTC"},
			} {
				if _, _, err := w.ledger.PutPolicy(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			byOtherResource, byOtherClient, fresh := w.res+"-r", w.res+"-c", w.res+"-f"
			// The earlier sessions, recorded and finished: one of another
			// resource, one of another client here, which Redis forgot since.
			for _, e := range []struct {
				res, client, id string
				actual          int64
			}{{other, "c1", byOtherResource, 20}, {w.res, "c2", byOtherClient, 30}} {
				if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: e.res, ClientID: e.client, SessionID: e.id, Amount: 50}); err != nil {
					t.Fatal(err)
				}
				if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: e.res, ClientID: e.client, SessionID: e.id, Actual: e.actual}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.rdb.Del(ctx, "qc:{"+w.res+"}:s:"+byOtherClient).Err(); err != nil {
				t.Fatal(err)
			}

			ledger.down.Store(true)
			for _, id := range []string{byOtherResource, byOtherClient, fresh} {
				res, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: w.res, ClientID: "c1", SessionID: id, Amount: 100})
				if err != nil || !res.FailOpen || res.Granted != 100 || res.Remaining < 0 {
					t.Fatalf("fail-open apply of %s: %+v, %v; want counted in Redis", id, res, err)
				}
			}
			ledger.down.Store(false)
			// One finishes before reconciliation (its ledger row is not there
			// yet: the finish settles nothing in the ledger).
			if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: w.res, ClientID: "c1", SessionID: byOtherResource, Actual: 60}); err != nil {
				t.Fatal(err)
			}

			rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, w.store, w.ledger, w.ledger, sched, zap.NewNop(), prometheus.NewRegistry())
			rep, err := rec.Resource(ctx, w.res)
			if err != nil || rep.FailOpenRecorded != 3 {
				t.Fatalf("reconcile: %+v, %v; want the 3 fail-open sessions recorded", rep, err)
			}
			if _, err := svc.Heartbeat(ctx, w.res, byOtherClient, "c1"); err != nil {
				t.Fatalf("heartbeat of a scoped fail-open session: %v", err)
			}
			for id, actual := range map[string]int64{byOtherClient: 70, fresh: 80} {
				if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: w.res, ClientID: "c1", SessionID: id, Actual: actual}); err != nil {
					t.Fatalf("finish of %s after reconciliation: %v", id, err)
				}
			}

			rows, err := w.ledger.SessionsByID(ctx, []string{byOtherResource, byOtherClient, fresh})
			if err != nil || rows[byOtherResource].ResourceName != other || rows[byOtherResource].ChargedAmount != 20 ||
				rows[byOtherClient].ClientID != "c2" || rows[byOtherClient].ChargedAmount != 30 {
				t.Fatalf("the earlier rows: %+v, %v; want them untouched", rows, err)
			}
			st, err := svc.Status(ctx, w.res)
			if err != nil {
				t.Fatal(err)
			}
			tot, err := w.ledger.PeriodTotals(ctx, w.res, rows[fresh].PeriodStart)
			if err != nil || tot.Charged != 30+60+70+80 || tot.Reserved != 0 || st.Used != tot.Charged || st.Reserved != 0 {
				t.Fatalf("ledger totals %+v (%v), Redis %+v: want both charged 240", tot, err, st)
			}
			if rep, err := rec.Resource(ctx, w.res); err != nil || rep.DriftCharged != 0 || rep.DriftReserved != 0 || rep.FailOpenRecorded != 0 {
				t.Fatalf("reconcile again: %+v, %v; want no drift", rep, err)
			}
		})
	}
}
