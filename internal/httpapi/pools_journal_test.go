package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/redisstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// lossWorld is a pools' API on one backend pair with what a Redis-loss
// test needs besides: the resource, a wipe of all of the resource's Redis
// keys (Redis lost them), and a pool controller on the same stores.
type lossWorld struct {
	a    *testAPI
	res  string
	wipe func(t *testing.T)
	ctl  *poolctl.Runner
	sql  *mysqlstore.Store
	n    int // probes made
}

// lossBackends runs fn on dev mode (miniredis, SQLite) and on real Redis
// and MySQL (QC_TEST_REDIS_ADDR, QC_TEST_MYSQL_DSN).
func lossBackends(t *testing.T, fn func(t *testing.T, w *lossWorld)) {
	ctl := func(rdb redis.UniversalClient, sql *mysqlstore.Store) *poolctl.Runner {
		return poolctl.New(sql, redisstore.New(rdb), sql, &period.Scheduler{}, zap.NewNop(), prometheus.NewRegistry(), 0, nil)
	}
	t.Run("dev", func(t *testing.T) {
		mr := miniredis.RunT(t)
		a, sql, _ := newPoolsHarnessOn(t, mr)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, &lossWorld{a: a, res: "jr", sql: sql, ctl: ctl(rdb, sql), wipe: func(*testing.T) { mr.FlushAll() }})
	})
	t.Run("real", func(t *testing.T) {
		rdb, sql := realPoolsStores(t)
		res := testenv.Resource(t)
		wipe := func(t *testing.T) {
			t.Helper()
			keys, err := rdb.Keys(t.Context(), "qc:{"+res+"}:*").Result()
			if err == nil && len(keys) > 0 {
				err = rdb.Del(t.Context(), keys...).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		fn(t, &lossWorld{a: startPoolsAPI(t, rdb, sql), res: res, sql: sql, ctl: ctl(rdb, sql), wipe: wipe})
	})
}

// pools is the resource's pools as status shows them: the shared pool,
// its buffer and the free buffer, every line's counters and lent buffer,
// and the grants with what is held of each (the controller's chosen mode
// is left out: Redis keeps it alone and the next tick chooses again).
func (w *lossWorld) pools(t *testing.T) string {
	t.Helper()
	st := w.a.status(t, w.res).body["pools"].(map[string]any)
	for _, l := range st["lines"].([]any) {
		delete(l.(map[string]any), "elasticityMode")
	}
	for _, g := range st["grants"].([]any) {
		delete(g.(map[string]any), "createdAt")
	}
	b, _ := json.Marshal(st)
	return string(b)
}

// lose wipes the resource's Redis keys and has the next apply rebuild them
// (an apply of 1 finished unused: it changes no counter status shows).
func (w *lossWorld) lose(t *testing.T) {
	t.Helper()
	w.wipe(t)
	w.n++
	id := fmt.Sprintf("probe-%d", w.n)
	r := w.a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":1,"businessLine":"a","critical":false,"sessionId":%q}`, w.res, id))
	if r.status == 200 {
		w.a.mustOK(t, request{method: "POST", path: "/quota/finish", body: fmt.Sprintf(`{"resourceName":%q,"sessionId":%q,"actualUsedAmount":0}`, w.res, id)})
	} else if r.status != 429 {
		t.Fatalf("apply after the loss: %d %s", r.status, r.raw)
	}
}

func lineOf(t *testing.T, pools, line string) map[string]any {
	t.Helper()
	var st map[string]any
	_ = json.Unmarshal([]byte(pools), &st)
	for _, l := range st["lines"].([]any) {
		if m := l.(map[string]any); m["businessLine"] == line {
			return m
		}
	}
	t.Fatalf("no line %s in %s", line, pools)
	return nil
}

// TestAVoidedReleaseIsNotLentAgainAfterRedisLoss is the review's scenario:
// five releases of 200 to line b, a CORE critical apply of line a that
// only the spare buffer lets through (b's unheld 1,000 goes into the shared
// pool), the five releases voided (each finds nothing lent: no RETURN),
// then Redis loses everything. The rebuild lent b the 1,000 again (the
// five RELEASE events, the move journalled nowhere) and took it from the
// shared pool, whose sessions held it (observed in production: 1,400 lent
// from five voided releases, 982 of it drawn by an apply). The move is now
// journalled (a RETURN of b's part, SPARE_TO_SHARED of the whole), and the
// rebuild gives back exactly what Redis had.
func TestAVoidedReleaseIsNotLentAgainAfterRedisLoss(t *testing.T) {
	lossBackends(t, func(t *testing.T, w *lossWorld) {
		base := "/admin/policies/" + w.res
		w.a.putPolicy(t, w.res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE","weight":2}`})
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/b", body: `{"tier":"GROWTH","weight":1}`})
		var ids []string
		for range 5 {
			r := w.a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":200,"businessLine":"b","reason":"promo"}`})
			ids = append(ids, r.body["release"].(map[string]any)["id"].(string))
		}
		// a: dedicated 2,000 and the shared pool's 6,000; 8,500 fits only
		// with b's unheld buffer.
		r := w.a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":8500,"businessLine":"a","critical":true,"sessionId":"big"}`, w.res))
		if r.status != 200 {
			t.Fatalf("the critical apply: %d %s", r.status, r.raw)
		}
		for _, id := range ids {
			w.a.mustOK(t, request{method: "DELETE", path: base + "/grants/" + id})
		}
		before := w.pools(t)
		if b := lineOf(t, before, "b"); fmt.Sprint(b["buffer"]) != "0" {
			t.Fatalf("set-up: b's lent buffer %v after the move, want 0: %s", b["buffer"], before)
		}
		w.lose(t)
		after := w.pools(t)
		if after != before {
			t.Fatalf("after Redis lost the pools:\n%s\nbefore:\n%s", after, before)
		}
		// b draws no buffer: none is lent to it.
		r = w.a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":1000,"businessLine":"b","continuation":true,"sessionId":"b1"}`, w.res))
		if r.status == 200 {
			if d := r.body["drawn"].(map[string]any); fmt.Sprint(d["buffer"]) != "0" && d["buffer"] != nil {
				t.Fatalf("b drew buffer voided releases lent it: %s", r.raw)
			}
		}
	})
}

// TestRandomPoolHistoriesSurviveRedisLoss runs random histories — applies
// of three lines (critical or not, continuations), finishes, buffer
// releases to a line or the shared pool and their voids, buffer resizes
// (bufferPercent 0–20) and controller ticks — then wipes the resource's
// Redis keys, lets the next apply rebuild them from the ledger and the
// journal, and demands the same pools as before the wipe: every line's
// lent buffer and counters, the shared pool and its buffer, the free
// buffer and the grants. It fails unless the histories moved the spare
// buffer (SPARE_TO_SHARED events) and voided releases after such a move.
func TestRandomPoolHistoriesSurviveRedisLoss(t *testing.T) {
	lossBackends(t, func(t *testing.T, w *lossWorld) {
		var moves, losses int
		for seed := range uint64(6) {
			res := w.res
			w.res = res + "-" + strconv.FormatUint(seed, 10)
			m, n := randomHistory(t, w, seed)
			moves += m
			losses += n
			w.res = res
		}
		t.Logf("%d spare moves, %d losses checked", moves, losses)
		if moves < 3 || losses < 6 {
			t.Fatalf("the histories made %d spare moves and %d losses; the test needs both", moves, losses)
		}
	})
}

// randomHistory plays one history on w.res, losing Redis at two random
// points and once at its end, and compares each time; it returns the
// spare moves made and the losses checked.
func randomHistory(t *testing.T, w *lossWorld, seed uint64) (moves, losses int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 21))
	base := "/admin/policies/" + w.res
	w.a.putPolicy(t, w.res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
	for _, l := range [][2]string{{"a", `{"tier":"CORE","weight":2}`}, {"b", `{"tier":"GROWTH","weight":1}`}, {"c", `{"tier":"EXPLORE","weight":1}`}} {
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/" + l[0], body: l[1]})
	}
	lines := []string{"a", "b", "c"}
	type open struct {
		id      string
		granted int64
	}
	var sessions []open
	var releases []string
	steps := 60
	lossAt := map[int]bool{rng.IntN(steps): true, rng.IntN(steps): true, steps - 1: true}
	for i := range steps {
		switch op := rng.IntN(20); {
		case op < 9: // an apply
			id := fmt.Sprintf("s%d-%d", seed, i)
			crit, cont := rng.IntN(3) > 0, rng.IntN(4) == 0
			r := w.a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":%d,"businessLine":%q,"critical":%t,"continuation":%t,"sessionId":%q}`,
				w.res, 1+rng.IntN(4000), lines[rng.IntN(3)], crit, cont, id))
			if r.status == 200 {
				g, _ := strconv.ParseInt(fmt.Sprint(r.body["grantedAmount"]), 10, 64)
				sessions = append(sessions, open{id, g})
			} else if r.status != 429 {
				t.Fatalf("apply: %d %s", r.status, r.raw)
			}
		case op < 13 && len(sessions) > 0: // a finish
			k := rng.IntN(len(sessions))
			s := sessions[k]
			sessions = append(sessions[:k], sessions[k+1:]...)
			w.a.mustOK(t, request{method: "POST", path: "/quota/finish", body: fmt.Sprintf(`{"resourceName":%q,"sessionId":%q,"actualUsedAmount":%d}`,
				w.res, s.id, rng.Int64N(s.granted+1))})
		case op < 16: // a release, to a line or the shared pool
			line := ""
			if k := rng.IntN(4); k < 3 {
				line = fmt.Sprintf(`,"businessLine":%q`, lines[k])
			}
			r := w.a.do(t, request{method: "POST", path: base + "/buffer/release", body: fmt.Sprintf(`{"amount":%d%s,"reason":"r"}`, 50+rng.IntN(400), line)})
			if r.status == 201 || r.status == 200 {
				releases = append(releases, r.body["release"].(map[string]any)["id"].(string))
			} else if r.status != 409 {
				t.Fatalf("release: %d %s", r.status, r.raw)
			}
		case op < 18 && len(releases) > 0: // a void
			k := rng.IntN(len(releases))
			w.a.mustOK(t, request{method: "DELETE", path: base + "/grants/" + releases[k]})
			releases = append(releases[:k], releases[k+1:]...)
		case op < 19: // a resize of the buffer
			b := rng.IntN(5) * 5
			w.a.mustOK(t, request{method: "PUT", path: base + "/pools", body: fmt.Sprintf(`{"sharedPercent":60,"dedicatedPercent":%d,"bufferPercent":%d}`, 40-b, b)})
		default: // a controller tick
			pol, err := w.sql.GetPolicy(t.Context(), w.res)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			if _, err := w.ctl.Tick(ctx, pol); err != nil {
				t.Fatalf("tick: %v", err)
			}
			cancel()
		}
		if lossAt[i] {
			before := w.pools(t)
			w.lose(t)
			if after := w.pools(t); after != before {
				t.Fatalf("seed %d step %d: after Redis lost the pools:\n%s\nbefore:\n%s", seed, i, after, before)
			}
			losses++
		}
	}
	for _, e := range w.a.get(t, base+"/pool-events?limit=500").body["events"].([]any) {
		if e.(map[string]any)["kind"] == "SPARE_TO_SHARED" {
			moves++
		}
	}
	return moves, losses
}

// TestARebuildsCutIsJournalled: Redis lost the pools while 1,000 of buffer
// was lent to line b, and the buffer was then halved before any apply: the
// layout's write rebuilt the moves and cut b's 1,000 to the new buffer of
// 500 (pools.Moves.Fields) without journalling the cut, so after the buffer
// grew back and Redis lost the pools again the rebuild lent b 1,000 where
// Redis had 500. The store's cut is now the one journalled (a RETURN).
func TestARebuildsCutIsJournalled(t *testing.T) {
	lossBackends(t, func(t *testing.T, w *lossWorld) {
		base := "/admin/policies/" + w.res
		w.a.putPolicy(t, w.res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE","weight":2}`})
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/b", body: `{"tier":"GROWTH","weight":1}`})
		w.a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":1000,"businessLine":"b","reason":"promo"}`})
		w.wipe(t)
		w.a.mustOK(t, request{method: "PUT", path: base + "/pools", body: `{"sharedPercent":60,"dedicatedPercent":35,"bufferPercent":5}`})
		w.a.mustOK(t, request{method: "PUT", path: base + "/pools", body: `{"sharedPercent":60,"dedicatedPercent":30,"bufferPercent":10}`})
		before := w.pools(t)
		if b := lineOf(t, before, "b"); fmt.Sprint(b["buffer"]) != "500" {
			t.Fatalf("set-up: b's lent buffer %v, want 500 (cut to the halved buffer): %s", b["buffer"], before)
		}
		w.lose(t)
		if after := w.pools(t); after != before {
			t.Fatalf("after Redis lost the pools again:\n%s\nbefore:\n%s", after, before)
		}
	})
}
