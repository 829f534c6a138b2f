package app_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/app"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// roundTrips is a go-redis hook counting the round trips (one command sent
// alone, or one pipeline) that name a key under prefix.
type roundTrips struct {
	prefix string
	mu     sync.Mutex
	n      int
	seen   map[string]int // first command of each round trip → round trips
}

func (h *roundTrips) names(c redis.Cmder) bool {
	for _, a := range c.Args() {
		if s, ok := a.(string); ok && strings.HasPrefix(s, h.prefix) {
			return true
		}
	}
	return false
}

func (h *roundTrips) count(first string) {
	h.mu.Lock()
	h.n++
	h.seen[first]++
	h.mu.Unlock()
}

func (h *roundTrips) reset() (n int, seen map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, seen = h.n, h.seen
	h.n, h.seen = 0, map[string]int{}
	return n, seen
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if h.names(c) {
			h.count(c.Name())
		}
		return next(ctx, c)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.names(c) {
				h.count(fmt.Sprintf("pipeline of %d (%s …)", len(cmds), c.Name()))
				break
			}
		}
		return next(ctx, cmds)
	}
}

// A scrape right after a load, when every used resource changed, reads
// their balances and burn samples in a few pipelines, not one round trip
// per resource (issue 23 §1: 1,000 used resources took ~31 rounds of 32
// concurrent reads, 2.2 s on a loaded machine). A go-redis hook on the
// server's client counts the round trips naming the test's resources
// during one scrape, taken once the burn-rate sampler has visited them
// all and a sample interval passed without a new sample (so that no
// background loop reads them meanwhile: the sweeper and reconciliation
// run hourly here). Every balance is in the scrape.
func TestScrapeOfManyChangedResourcesIsFewRoundTrips(t *testing.T) {
	const n = 1000
	base := testenv.Resource(t)
	h := &roundTrips{prefix: "qc:{" + base + "-", seen: map[string]int{}}
	t.Cleanup(app.SetRedisHook(h)) // cleaned up after the server stops
	addr := privateRedis(t)
	dsn, selects := ownMySQLUser(t)
	s := testenv.Start(t, testenv.Real, "--sweep-interval", "1h", "--reconcile-interval", "1h", "--redis-addr", addr, "--mysql-dsn", dsn)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", base, i)
	}
	var wg sync.WaitGroup
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for r := range work {
				// A breaker may open on a loaded machine (a 503, the
				// answer it owes then); the setup tries again, as a
				// caller would. What is measured is the scrape after.
				if code, out := until2xx(t, s, "PUT", "/admin/policies/"+r, map[string]any{"quotaType": "COUNT", "totalLimit": 1000}); code/100 != 2 {
					t.Errorf("put policy %s: %d %v", r, code, out)
				}
				if code, out := until2xx(t, s, "POST", "/quota/apply", map[string]any{"resourceName": r, "clientId": "c", "applyAmount": 1, "sessionId": "s-" + r}); code != 200 {
					t.Errorf("apply %s: %d %v", r, code, out)
				}
			}
		})
	}
	for _, r := range names {
		work <- r
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		return
	}
	done := time.Now()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	testenv.Eventually(t, 60*time.Second, "a burn sample of every resource after the applies", func() bool {
		if time.Since(done) < admin.DefaultSampleInterval+time.Second {
			return false
		}
		cmds, _ := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for _, r := range names {
				p.ZCard(context.Background(), "qc:{"+r+"}:burn")
			}
			return nil
		})
		for _, c := range cmds {
			if c.(*redis.IntCmd).Val() == 0 {
				return false
			}
		}
		return len(cmds) == n
	})
	// The sampler reads one resource after another: wait until a whole
	// sample interval passes without a new sample (its ticks are quiet).
	samples := func() (n int64) {
		cmds, _ := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for _, r := range names {
				p.ZCard(context.Background(), "qc:{"+r+"}:burn")
			}
			return nil
		})
		for _, c := range cmds {
			n += c.(*redis.IntCmd).Val()
		}
		return n
	}
	for n, deadline := samples(), time.Now().Add(2*time.Minute); ; {
		time.Sleep(admin.DefaultSampleInterval + time.Second)
		m := samples()
		if m == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the burn-rate sampler still sampled the resources 2 minutes after the applies (%d → %d samples)", n, m)
		}
		n = m
	}
	h.reset()
	q0 := selects()
	body := scrape(t, s)
	got, seen := h.reset()
	queries := selects() - q0
	for _, r := range names {
		if !strings.Contains(body, `quota_remaining_calls{resource="`+r+`"} 999`) {
			var mine []string
			for _, l := range strings.Split(body, "\n") {
				if strings.Contains(l, r) || strings.Contains(l, "scrape_errors") {
					mine = append(mine, l)
				}
			}
			t.Fatalf("no quota_remaining_calls 999 of %s in the scrape; its lines: %v", r, mine)
		}
	}
	// Balances and burn samples: 2 pipelines of 500 each, and a few
	// commands of another loop that may fall in the scrape.
	if want := 4 + 8; got > want {
		t.Fatalf("the scrape made %d Redis round trips naming the %d changed resources; want ≤ %d (a few batches). By first command: %v", got, n, want, seen)
	}
	t.Logf("%d round trips naming the resources: %v", got, seen)
	// MySQL: the pool gauges ask which resources use pools in one query
	// per 500 (none here), and the balance reads refresh the expired
	// policies in one query per 500; before, ~8 SELECTs per resource
	// (policy, pool settings and lines twice, grants; the policy cache's
	// refresh). The bound leaves room for a lifecycle pass (≤ ~100
	// statements) that may fall in the scrape.
	if want := int64(150); queries > want {
		t.Fatalf("the scrape of %d changed resources made %d SELECTs on MySQL; want ≤ %d (a few batches)", n, queries, want)
	}
	t.Logf("%d MySQL SELECTs during the scrape", queries)
}

// until2xx sends a request until it is answered other than 503 (a breaker
// opened on a loaded machine), at most 20 times, and returns the last answer.
func until2xx(t *testing.T, s *testenv.Server, method, path string, body map[string]any) (int, map[string]any) {
	var code int
	var out map[string]any
	for range 20 {
		if code, out, _ = call(t, s, method, path, body); code != 503 {
			break
		}
		time.Sleep(500 * time.Millisecond) // a backoff, not an assertion
	}
	return code, out
}

// ownMySQLUser makes a MySQL user of the test's own, returns a DSN of a
// fresh database for it and a count of the SELECTs that user has sent
// (MariaDB's information_schema.USER_STATISTICS, with userstat on), so
// other packages' tests on the same server do not count.
func ownMySQLUser(t *testing.T) (string, func() int64) {
	t.Helper()
	root, err := sql.Open("mysql", testenv.MySQLServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	user := "qc_scrape_" + testenv.RandomSuffix()
	for _, q := range []string{
		"SET GLOBAL userstat = 1",
		"CREATE USER '" + user + "'@'%'",
		"CREATE USER '" + user + "'@'localhost'",
		"GRANT ALL ON *.* TO '" + user + "'@'%'",
		"GRANT ALL ON *.* TO '" + user + "'@'localhost'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v (the SELECT count needs MariaDB's userstat)", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = root.Exec("DROP USER IF EXISTS '" + user + "'@'%', '" + user + "'@'localhost'")
	})
	cfg, err := mysql.ParseDSN(testenv.MustMySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, ""
	return cfg.FormatDSN(), func() int64 {
		var v int64
		err := root.QueryRow("SELECT COALESCE(SUM(SELECT_COMMANDS), 0) FROM information_schema.USER_STATISTICS WHERE USER = ?", user).Scan(&v)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
