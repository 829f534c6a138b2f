package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	opsadmin "github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// stoppedLedger is the quota Service's MySQL that can be stopped: while
// down, its ledger inserts and pool events fail as an unreachable MySQL's
// do (the policies and the admin's writes still answer).
type stoppedLedger struct {
	*mysqlstore.Store
	down atomic.Bool
}

func (l *stoppedLedger) InsertSession(ctx context.Context, rec quota.UsageRecord) error {
	if l.down.Load() {
		return fmt.Errorf("insert session: MySQL stopped: %w", quota.ErrUnavailable)
	}
	return l.Store.InsertSession(ctx, rec)
}

func (l *stoppedLedger) RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error {
	if l.down.Load() {
		return fmt.Errorf("pool events: MySQL stopped: %w", quota.ErrUnavailable)
	}
	return l.Store.RecordPoolEvents(ctx, resource, evs)
}

// TestASpareMoveOfAnApplyAnswered503StandsAndIsJournalled holds the
// outcome docs/pools.md §5 (open finding 6) chose for an apply answered
// 503 after apply.lua moved the spare buffer: the move stands (the
// session's grant is given back, the moved buffer stays in the shared
// pool: no token lost, nothing past the limit), it is journalled once
// MySQL answers again (the drain), and a rebuild from MySQL alone gives
// Redis' pools back. The releases to the line the move took from are
// voided afterwards with nothing to return.
func TestASpareMoveOfAnApplyAnswered503StandsAndIsJournalled(t *testing.T) {
	run := func(t *testing.T, rdb *redis.Client, sql *mysqlstore.Store, res string, wipe func(t *testing.T)) {
		led := &stoppedLedger{Store: sql}
		rs := redisstore.New(rdb)
		sched := &period.Scheduler{}
		svc := quota.NewService(rs, led, sql, sched, quota.Options{Pools: quota.PoolStores{Config: led, Balances: rs}, LedgerTimeout: time.Second})
		adm := opsadmin.NewPools(sql, rs, svc, sched, nil)
		srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(prometheus.NewRegistry()),
			Pools: httpapi.PoolAdmin{Lines: adm, Grants: adm, Reclaims: adm}})
		ts := httptest.NewServer(srv.Handler())
		t.Cleanup(ts.Close)
		w := &lossWorld{a: &testAPI{URL: ts.URL, srv: srv}, res: res, sql: sql, wipe: wipe}
		a, base := w.a, "/admin/policies/"+res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/a", body: `{"tier":"CORE","weight":2}`})
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/b", body: `{"tier":"GROWTH","weight":1}`})
		var ids []string
		for range 5 {
			r := a.mustOK(t, request{method: http.MethodPost, path: base + "/buffer/release", body: `{"amount":200,"businessLine":"b","reason":"promo"}`})
			ids = append(ids, r.body["release"].(map[string]any)["id"].(string))
		}
		led.down.Store(true)
		// a: dedicated 2,000 and the shared pool's 6,000; 8,500 fits only
		// with b's unheld buffer: the move is made, its journal and the
		// session's ledger row fail.
		r := a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":8500,"businessLine":"a","critical":true,"sessionId":"big"}`, res))
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("the critical apply with MySQL stopped: %d %s, want 503", r.status, r.raw)
		}
		led.down.Store(false)
		if err := svc.DrainSpareMoves(t.Context(), res); err != nil { // the next tick's drain
			t.Fatal(err)
		}
		// The failed apply's grant is given back (compensateLater).
		for deadline := time.Now().Add(10 * time.Second); ; {
			if fmt.Sprint(lineOf(t, w.pools(t), "a")["reserved"]) == "0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the 503 apply's grant is still held: %s", w.pools(t))
			}
			time.Sleep(50 * time.Millisecond)
		}
		before := w.pools(t)
		if b := lineOf(t, before, "b"); fmt.Sprint(b["buffer"]) != "0" {
			t.Fatalf("b's lent buffer %v after the move, want 0 (the move stands): %s", b["buffer"], before)
		}
		ev := a.mustOK(t, request{method: http.MethodGet, path: base + "/pool-events?limit=50"})
		var spare int
		for _, e := range ev.body["events"].([]any) {
			if e.(map[string]any)["kind"] == pools.KindSpareToShared {
				spare++
			}
		}
		if spare != 1 {
			t.Fatalf("%d SPARE_TO_SHARED events after MySQL came back, want 1: %s", spare, ev.raw)
		}
		w.lose(t)
		if after := w.pools(t); after != before {
			t.Fatalf("rebuilt from MySQL:\n%s\nRedis had:\n%s", after, before)
		}
		for _, id := range ids {
			if r := a.do(t, request{method: http.MethodDelete, path: base + "/grants/" + id}); r.status != http.StatusOK {
				t.Fatalf("void %s: %d %s", id, r.status, r.raw)
			}
		}
		if after := w.pools(t); fmt.Sprint(lineOf(t, after, "b")["buffer"]) != "0" {
			t.Fatalf("after the voids: %s", after)
		}
	}
	t.Run("dev", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		run(t, rdb, newSQLite(t), "sp", func(*testing.T) { mr.FlushAll() })
	})
	t.Run("real", func(t *testing.T) {
		rdb, sql := realPoolsStores(t)
		res := testenv.Resource(t)
		run(t, rdb, sql, res, func(t *testing.T) {
			keys, err := rdb.Keys(t.Context(), "qc:{"+res+"}:*").Result()
			if err == nil && len(keys) > 0 {
				err = rdb.Del(t.Context(), keys...).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}
