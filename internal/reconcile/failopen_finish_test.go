package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/sweeper"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestFailOpenSessionSettledBeforeReconcileLeavesAnotherResourcesRowAlone:
// sessions X and Y are USING rows of resource R1 (client c1). While MySQL
// is down, fail-open sessions X and Y are granted on R2 (client c2) in Redis
// under the same bare ids. X is finished (503 while MySQL is down, then
// again once it is back) and Y swept as LEAKED, both before reconciliation
// writes their rows. The ledger's finish and leak updates match the row's
// resource and client, so R1's rows stay USING with their amounts, and
// reconciliation records R2's sessions once, under their scoped ids, with
// the finished amount and the leaked grant: the ledger's totals equal
// Redis' on both resources. Before, the finish settled R1's row X with R2's
// usage and the sweep marked R1's row Y LEAKED (R1's live sessions lost,
// their use counted as R2's and then again under the scoped ids).
func TestFailOpenSessionSettledBeforeReconcileLeavesAnotherResourcesRowAlone(t *testing.T) {
	for _, mode := range []string{"real", "dev"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			w := newOvergrantWorld(t, mode)
			r1, r2 := testenv.Resource(t)+"-r1", w.res
			ledger := &finishFlakyLedger{&flakyLedger{Store: w.ledger}}
			sched := &period.Scheduler{}
			svc := quota.NewService(w.store, ledger, w.ledger, sched, noCatchUp)
			for _, p := range []quota.Policy{
				{ResourceName: r1, QuotaType: quota.TypeTokens, TotalLimit: 10000, LeakThresholdSeconds: 300, Timezone: "UTC"},
				{ResourceName: r2, QuotaType: quota.TypeTokens, TotalLimit: 10000, FailMode: quota.FailOpen, LeakThresholdSeconds: 300, Timezone: "UTC"},
			} {
				if _, _, err := w.ledger.PutPolicy(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			x, y := r2+"-x", r2+"-y"
			for _, id := range []string{x, y} {
				if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: r1, ClientID: "c1", SessionID: id, Amount: 50}); err != nil {
					t.Fatal(err)
				}
			}
			r1Rows, err := w.ledger.SessionsByID(ctx, []string{x, y})
			if err != nil {
				t.Fatal(err)
			}

			ledger.down.Store(true)
			for _, id := range []string{x, y} {
				res, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: r2, ClientID: "c2", SessionID: id, Amount: 100})
				if err != nil || !res.FailOpen || res.Granted != 100 {
					t.Fatalf("fail-open apply of %s: %+v, %v", id, res, err)
				}
			}
			if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: r2, ClientID: "c2", SessionID: x, Actual: 60}); !errors.Is(err, quota.ErrUnavailable) {
				t.Fatalf("finish while MySQL is down: %v; want ErrUnavailable", err)
			}
			ledger.down.Store(false)
			// The retry, before reconciliation: X has no row of its own yet.
			if fin, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: r2, ClientID: "c2", SessionID: x, Actual: 60}); err != nil || fin.Charged != 60 {
				t.Fatalf("finish after MySQL is back: %+v, %v", fin, err)
			}
			// Y's lease runs out; the sweeper charges it LEAKED.
			past := time.Now().Add(-time.Minute).UnixMilli()
			if err := w.rdb.ZAdd(ctx, "qc:{"+r2+"}:leases", redis.Z{Score: float64(past), Member: y}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := w.rdb.HSet(ctx, "qc:{"+r2+"}:s:"+y, "lease", past).Err(); err != nil {
				t.Fatal(err)
			}
			sw := sweeper.New(sweeper.Config{Retention: time.Hour}, w.ledger, w.store, w.ledger, zap.NewNop(), prometheus.NewRegistry())
			sw.SweepOnce(ctx)
			if s, err := svc.Status(ctx, r2); err != nil || s.Used != 160 || s.Reserved != 0 {
				t.Fatalf("R2 in Redis after the finish and the sweep: %+v, %v; want used 160", s, err)
			}
			if rows, err := w.ledger.SessionsByID(ctx, []string{x, y}); err != nil || rows[x] != r1Rows[x] || rows[y] != r1Rows[y] {
				t.Fatalf("R1's rows before reconciliation:\n %+v (%v)\nwant them untouched\n %+v", rows, err, r1Rows)
			}

			rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, w.store, w.ledger, w.ledger, sched, zap.NewNop(), prometheus.NewRegistry())
			rep, err := rec.Resource(ctx, r2)
			if err != nil || rep.FailOpenRecorded != 2 {
				t.Fatalf("reconcile: %+v, %v; want the 2 fail-open sessions recorded", rep, err)
			}
			sx, sy := quota.ScopedSessionID(r2, "c2", x), quota.ScopedSessionID(r2, "c2", y)
			rows, err := w.ledger.SessionsByID(ctx, []string{x, y, sx, sy})
			if err != nil || rows[x] != r1Rows[x] || rows[y] != r1Rows[y] || rows[x].Status != quota.StatusUsing || rows[x].ChargedAmount != 50 {
				t.Fatalf("R1's rows after reconciliation:\n %+v (%v)\nwant them untouched\n %+v", rows, err, r1Rows)
			}
			if r := rows[sx]; r.ResourceName != r2 || r.Status != quota.StatusFinished || r.ChargedAmount != 60 {
				t.Fatalf("R2's finished session: %+v; want FINISHED, charged 60", r)
			}
			if r := rows[sy]; r.ResourceName != r2 || r.Status != quota.StatusLeaked || r.ChargedAmount != 100 {
				t.Fatalf("R2's leaked session: %+v; want LEAKED, charged 100", r)
			}
			// (Each resource's period starts when its policy was made.)
			periods := map[string]time.Time{r1: rows[x].PeriodStart, r2: rows[sx].PeriodStart}
			for res, want := range map[string]quota.PeriodTotals{r1: {Reserved: 100}, r2: {Charged: 160}} {
				tot, err := w.ledger.PeriodTotals(ctx, res, periods[res])
				st, serr := svc.Status(ctx, res)
				if err != nil || serr != nil || tot != want || st.Used != tot.Charged || st.Reserved != tot.Reserved {
					t.Fatalf("%s: ledger totals %+v (%v), Redis %+v (%v); want both %+v", res, tot, err, st, serr, want)
				}
				if rep, err := rec.Resource(ctx, res); err != nil || rep.DriftCharged != 0 || rep.DriftReserved != 0 || rep.FailOpenRecorded != 0 {
					t.Fatalf("reconcile %s again: %+v, %v; want no drift", res, rep, err)
				}
			}
			// R1's sessions still finish normally.
			if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: r1, ClientID: "c1", SessionID: x, Actual: 45}); err != nil {
				t.Fatal(err)
			}
			if r, err := w.ledger.Session(ctx, x); err != nil || r.ResourceName != r1 || r.Status != quota.StatusFinished || r.ChargedAmount != 45 {
				t.Fatalf("R1's row X after its finish: %+v, %v", r, err)
			}
		})
	}
}

// finishFlakyLedger is flakyLedger whose FinishSession fails too while
// down.
type finishFlakyLedger struct{ *flakyLedger }

func (f *finishFlakyLedger) FinishSession(ctx context.Context, rec quota.UsageRecord) error {
	if f.down.Load() {
		return fmt.Errorf("finish: %w", quota.ErrUnavailable)
	}
	return f.Store.FinishSession(ctx, rec)
}

// TestAReplayOfAFailOpenSessionWhoseIDIsAnothersIsNotASecondGrant
// (docs/pools.md §5 D): a fail-open session X on R2 (client c2), whose
// bare id is R1's USING row, is applied for again with the same id once
// MySQL is back, before reconciliation. The retry replays it (moved to its
// scoped id, where its row is written) instead of making a second grant
// there: R2 holds 100 reserved and one session, and reconciliation finds
// the session recorded, without drift. Before, the retry was a fresh grant
// under the scoped id (R2 reserved 200, two sessions) and the fail-open
// session was never recorded.
func TestAReplayOfAFailOpenSessionWhoseIDIsAnothersIsNotASecondGrant(t *testing.T) {
	for _, mode := range []string{"real", "dev"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			w := newOvergrantWorld(t, mode)
			r1, r2 := testenv.Resource(t)+"-r1", w.res
			ledger := &flakyLedger{Store: w.ledger}
			sched := &period.Scheduler{}
			svc := quota.NewService(w.store, ledger, w.ledger, sched, noCatchUp)
			for _, p := range []quota.Policy{
				{ResourceName: r1, QuotaType: quota.TypeTokens, TotalLimit: 10000, LeakThresholdSeconds: 300, Timezone: "UTC"},
				{ResourceName: r2, QuotaType: quota.TypeTokens, TotalLimit: 10000, FailMode: quota.FailOpen, LeakThresholdSeconds: 300, Timezone: "UTC"},
			} {
				if _, _, err := w.ledger.PutPolicy(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			x := r2 + "-x"
			if _, err := svc.Apply(ctx, quota.ApplyRequest{ResourceName: r1, ClientID: "c1", SessionID: x, Amount: 50}); err != nil {
				t.Fatal(err)
			}
			ledger.down.Store(true)
			req := quota.ApplyRequest{ResourceName: r2, ClientID: "c2", SessionID: x, Amount: 100}
			if res, err := svc.Apply(ctx, req); err != nil || !res.FailOpen || res.Granted != 100 {
				t.Fatalf("fail-open apply: %+v, %v", res, err)
			}
			ledger.down.Store(false)
			res, err := svc.Apply(ctx, req)
			if err != nil || !res.Replayed || res.Granted != 100 || res.SessionID != x {
				t.Fatalf("the retry: %+v, %v; want the fail-open session replayed", res, err)
			}
			if st, err := svc.Status(ctx, r2); err != nil || st.Reserved != 100 || st.ActiveSessions != 1 {
				t.Fatalf("R2 after the retry: %+v, %v; want 100 reserved by one session", st, err)
			}
			sx := quota.ScopedSessionID(r2, "c2", x)
			row, err := w.ledger.Session(ctx, sx)
			if err != nil || row.ResourceName != r2 || row.Status != quota.StatusUsing || row.GrantedAmount != 100 {
				t.Fatalf("R2's row: %+v, %v; want USING 100 under the scoped id", row, err)
			}
			rec := reconcile.New(reconcile.Config{Grace: time.Hour, Settle: time.Millisecond}, w.store, w.ledger, w.ledger, sched, zap.NewNop(), prometheus.NewRegistry())
			for range 2 {
				if rep, err := rec.Resource(ctx, r2); err != nil || rep.DriftCharged != 0 || rep.DriftReserved != 0 || rep.FailOpenRecorded != 0 {
					t.Fatalf("reconcile: %+v, %v; want the session found recorded, no drift", rep, err)
				}
			}
			if _, err := svc.Finish(ctx, quota.FinishRequest{ResourceName: r2, ClientID: "c2", SessionID: x, Actual: 70}); err != nil {
				t.Fatal(err)
			}
			tot, err := w.ledger.PeriodTotals(ctx, r2, row.PeriodStart)
			st, serr := svc.Status(ctx, r2)
			if err != nil || serr != nil || tot != (quota.PeriodTotals{Charged: 70}) || st.Used != 70 || st.Reserved != 0 {
				t.Fatalf("R2: ledger %+v (%v), Redis %+v (%v); want both charged 70", tot, err, st, serr)
			}
			if r, err := w.ledger.Session(ctx, x); err != nil || r.ResourceName != r1 || r.Status != quota.StatusUsing || r.ChargedAmount != 50 {
				t.Fatalf("R1's row: %+v, %v; want it untouched", r, err)
			}
		})
	}
}
