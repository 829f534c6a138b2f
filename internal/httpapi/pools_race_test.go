package httpapi_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// raceN is how many requests each race test sends at once.
const raceN = 16

// raceBackends runs fn in dev mode (miniredis, SQLite: one instance) and on
// the real Redis and MariaDB with two instances (two servers, each with
// its own MySQL connection pool) sharing them, as poolsBackends does.
// as[0] answers the reads.
func raceBackends(t *testing.T, fn func(t *testing.T, as []*testAPI, res string)) {
	t.Run("dev", func(t *testing.T) {
		a, _ := newPoolsHarness(t)
		fn(t, []*testAPI{a}, "ov")
	})
	t.Run("real", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: testenv.MustRedis(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		dsn := testenv.MustMySQL(t)
		var as []*testAPI
		for i := range 2 {
			sql, err := mysqlstore.Open(t.Context(), dsn, mysqlstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sql.Close() })
			if i == 0 {
				if err := sql.Migrate(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			as = append(as, startPoolsAPI(t, rdb, sql))
		}
		fn(t, as, testenv.Resource(t))
	})
}

// race sends rqs all at once, in turn to each of as, and returns their
// answers, in rqs' order.
func race(t *testing.T, as []*testAPI, rqs []request) []reply {
	t.Helper()
	out := make([]reply, len(rqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, rq := range rqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = as[i%len(as)].do(t, rq)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// TestConcurrentLinesNeverOverfillTheDedicatedPool: PUTs of different lines
// of one resource at once each checked the lines' explicit dedicated
// amounts against the dedicated pool as they had read them, then wrote:
// together they passed it. Now each change of a resource's lines takes its
// turn (the policy row's lock): the lines that fit are stored, every other
// PUT is answered 400 naming "dedicated", and Redis' layout holds exactly
// the stored lines.
func TestConcurrentLinesNeverOverfillTheDedicatedPool(t *testing.T) {
	raceBackends(t, func(t *testing.T, as []*testAPI, res string) {
		a := as[0]
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`) // dedicated pool 30 000
		base := "/admin/policies/" + res
		rqs := make([]request, raceN)
		for i := range rqs {
			rqs[i] = request{method: http.MethodPut, path: fmt.Sprintf("%s/lines/l%02d", base, i), body: `{"tier":"CORE","dedicated":4000}`}
		}
		var won int
		for i, r := range race(t, as, rqs) {
			switch msg, _ := r.body["message"].(string); {
			case r.status == http.StatusCreated:
				won++
			case r.status == http.StatusBadRequest && r.body["code"] == "INVALID_ARGUMENT" && strings.HasPrefix(msg, "invalid dedicated:"):
			default:
				t.Errorf("PUT l%02d: %d %s, want 201 or 400 naming dedicated", i, r.status, r.raw)
			}
		}
		lines := a.get(t, base+"/lines")
		stored, ok := lines.body["lines"].([]any)
		if !ok {
			t.Fatalf("the lines cannot be read: %d %s", lines.status, lines.raw)
		}
		var sum int64
		for _, l := range stored {
			n, _ := strconv.ParseInt(fmt.Sprint(l.(map[string]any)["dedicated"]), 10, 64)
			sum += n
		}
		if won != 7 || len(stored) != won || sum > 30000 {
			t.Fatalf("%d PUTs won, %d lines stored with %d dedicated in all (pool 30 000, 7 fit): %s", won, len(stored), sum, lines.raw)
		}
		if st := a.status(t, res); len(st.body["pools"].(map[string]any)["lines"].([]any)) != won {
			t.Fatalf("Redis' layout does not hold the %d stored lines: %s", won, st.raw)
		}
	})
}

// TestConcurrentGrantsNeverPassTheLargestAmount: grants added at once each
// checked the limit and the grants not yet expired against 2^53-1 as they
// had read them, then wrote: together they passed it. Now they take turns:
// the grants that fit are stored, every other is answered 400 naming
// "amount".
func TestConcurrentGrantsNeverPassTheLargestAmount(t *testing.T) {
	raceBackends(t, func(t *testing.T, as []*testAPI, res string) {
		a := as[0]
		const limit = 1<<53 - 1 - 1000 // room for 1 000 of grants
		a.putPolicy(t, res, fmt.Sprintf(`{"quotaType":"TOKENS","totalLimit":%d}`, limit))
		base := "/admin/policies/" + res
		exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		rqs := make([]request, raceN)
		for i := range rqs {
			rqs[i] = request{method: http.MethodPost, path: base + "/grants", body: `{"amount":300,"expiresAt":"` + exp + `"}`}
		}
		var won int
		for i, r := range race(t, as, rqs) {
			switch msg, _ := r.body["message"].(string); {
			case r.status == http.StatusCreated:
				won++
			case r.status == http.StatusBadRequest && r.body["code"] == "INVALID_ARGUMENT" && strings.HasPrefix(msg, "invalid amount:"):
			default:
				t.Errorf("grant %d: %d %s, want 201 or 400 naming amount", i, r.status, r.raw)
			}
		}
		gs := a.get(t, base+"/grants")
		stored, ok := gs.body["grants"].([]any)
		if n := len(stored); !ok || won != 3 || n != won {
			t.Fatalf("%d grants won, %d stored (room for 3): %s", won, n, gs.raw)
		}
	})
}
