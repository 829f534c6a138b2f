package app_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/app"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// startOn runs one more quota-center (app.Serve on 127.0.0.1:0) on the given
// real Redis (redisArgs: --redis-addr and the like) and MySQL database, with
// the admin token (and extra flags), and stops it in t.Cleanup.
// testenv.Start makes a fresh database per server; several instances on one
// database need this.
func startOn(t *testing.T, mode testenv.Mode, redisArgs []string, dsn, adminToken string, extra ...string) *testenv.Server {
	t.Helper()
	args := append([]string{
		"--http-addr", "127.0.0.1:0", "--log-level", "warn", "--sweep-interval", "100ms",
		"--mysql-dsn", dsn, "--migrate-on-start",
		"--admin-tokens", testenv.AdminTokenName + ":" + adminToken,
	}, redisArgs...)
	if !slices.Contains(extra, "--api-keys") {
		args = append(args, "--insecure-open-quota") // production refuses an open /quota/* without it
	}
	args = append(args, extra...)
	ledger, err := sqlx.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	// The server's log (warnings and errors) is shown when the test fails:
	// a 500 or a 503 in these tests is explained by it.
	logs := &lockedBuffer{}
	go func() { done <- app.Serve(ctx, args, logs, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve stopped with error: %v", err)
			}
			if t.Failed() {
				out := logs.String()
				if len(out) > 16<<10 {
					out = "…" + out[len(out)-16<<10:]
				}
				t.Logf("log of the instance on %s:\n%s", a, out)
			}
		})
		return &testenv.Server{URL: "http://" + a, Ledger: ledger, Mode: mode, AdminToken: adminToken}
	case err := <-done:
		cancel()
		t.Fatalf("serve did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start within 30s")
	}
	return nil
}

// twoInstances starts two quota-centers on the same real Redis (or the
// test Redis Cluster) and the same fresh MySQL database. Dev mode has no
// shared backends to share (miniredis and SQLite are per process), so it is
// skipped there. extra flags go to both.
func twoInstances(t *testing.T, mode testenv.Mode, extra ...string) (a, b *testenv.Server) {
	t.Helper()
	if mode == testenv.Dev {
		t.Skip("two instances need shared backends: dev mode's embedded Redis and SQLite are per process")
	}
	redisArgs := testenv.RedisArgs(t, mode)
	dsn := testenv.MustMySQL(t)
	token := "two-instances-" + testenv.RandomSuffix() + testenv.RandomSuffix()
	a = startOn(t, mode, redisArgs, dsn, token, extra...) // migrates first
	b = startOn(t, mode, redisArgs, dsn, token, extra...)
	return a, b
}

// sharedResource is a resource name for this test; testenv.Resource removes
// its keys from the shared Redis (and the test cluster) when it ends.
func sharedResource(t *testing.T) string { return testenv.Resource(t) }

// callRetry POSTs body like a well-behaved client: a 503 (the process or a
// backend overloaded, as under -race on a small machine) is retried with the
// same body, which carries a session id, so a retry never charges twice.
func callRetry(t *testing.T, s *testenv.Server, path string, body map[string]any) (int, map[string]any) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		code, out, _ := call(t, s, http.MethodPost, path, body)
		if code != http.StatusServiceUnavailable || attempt == 30 {
			return code, out
		}
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
}

// leakedCount reads quota_sessions_leaked_total{resource} from an
// instance's /metrics (0 when the series is absent).
func leakedCount(t *testing.T, s *testenv.Server, resource string) int64 {
	t.Helper()
	return int64(metricValue(t, s, `quota_sessions_leaked_total{resource="`+resource+`"}`))
}

// metricValue reads one series (name with its labels, as /metrics spells
// it) from an instance's /metrics; 0 when the series is absent.
func metricValue(t *testing.T, s *testenv.Server, series string) float64 {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	prefix := series + " "
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", sc.Text(), err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return 0
}

func TestTwoInstancesNeverGrantMoreThanTheLimit(t *testing.T) {
	for _, m := range testenv.Modes() {
		t.Run(string(m), func(t *testing.T) {
			a, b := twoInstances(t, m)
			via := []*testenv.Server{a, b}
			r := sharedResource(t)
			// 300 grants fit in 400 applies, 200 through each instance: each
			// must grant at least 100 whichever gets to Redis first (with
			// auto-pipelining one instance's calls can arrive in a burst).
			const limit, amount, n = 2100, 7, 400
			putPolicy(t, a, r, map[string]any{"quotaType": "TOKENS", "totalLimit": limit})
			// Both instances know the policy before the burst, as long-running
			// ones would (a cold policy cache under 200 concurrent requests
			// is another test's subject).
			for _, s := range via {
				getStatus(t, s, r)
			}

			// 400 concurrent applies, alternating between the instances.
			type grant struct {
				id string
				on int // index in via of the instance that granted it
			}
			var mu sync.Mutex
			var granted []grant
			codes := map[int]int{}
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					code, out := callRetry(t, via[i%2], "/quota/apply", map[string]any{
						"resourceName": r, "applyAmount": amount, "sessionId": fmt.Sprintf("two-%03d", i), "clientId": "c"})
					mu.Lock()
					defer mu.Unlock()
					codes[code]++
					if code == http.StatusOK {
						if num(t, out, "grantedAmount") != amount {
							t.Errorf("partial grant %v", out)
						}
						granted = append(granted, grant{id: out["sessionId"].(string), on: i % 2})
					}
				})
			}
			wg.Wait()
			const want = limit / amount
			if len(granted) != want || codes[http.StatusOK] != want || codes[http.StatusTooManyRequests] != n-want {
				t.Fatalf("granted %d (want exactly %d), codes %v", len(granted), want, codes)
			}
			perInstance := [2]int{}
			for _, g := range granted {
				perInstance[g.on]++
			}
			if perInstance[0] == 0 || perInstance[1] == 0 {
				t.Fatalf("grants per instance %v: both must have granted", perInstance)
			}
			for _, s := range via {
				st, _ := getStatus(t, s, r)
				if st.reserved != want*amount || st.used != 0 || st.remaining != limit-want*amount || st.active != want {
					t.Fatalf("status via %s after applies: %+v", s.URL, st)
				}
			}
			_, ledgerReserved, rows := ledgerSums(t, a, r)
			if ledgerReserved != want*amount || rows != want {
				t.Fatalf("ledger reserved %d in %d rows; want %d in %d", ledgerReserved, rows, want*amount, want)
			}

			// The same session id applied through both at once is granted once.
			rx := sharedResource(t)
			idem := map[string]any{"resourceName": rx, "applyAmount": 5, "sessionId": "both", "clientId": "c"}
			putPolicy(t, b, rx, map[string]any{"quotaType": "COUNT", "totalLimit": 100})
			idemCodes := make([]int, 20)
			for i := range idemCodes {
				wg.Go(func() { idemCodes[i], _ = callRetry(t, via[i%2], "/quota/apply", idem) })
			}
			wg.Wait()
			for i, c := range idemCodes {
				if c != http.StatusOK {
					t.Fatalf("repeated apply %d: %d", i, c)
				}
			}
			if st, _ := getStatus(t, a, rx); st.reserved != 5 || st.active != 1 {
				t.Fatalf("one session applied 20 times through two instances: %+v", st)
			}

			// Finish every session through the other instance than the one
			// that granted it, all at once.
			var sum int64
			for _, g := range granted {
				actual := rand.Int64N(amount + 3) // some over the grant
				sum += actual
				wg.Go(func() {
					code, out := callRetry(t, via[1-g.on], "/quota/finish", map[string]any{"resourceName": r, "sessionId": g.id, "actualUsedAmount": actual})
					if code != http.StatusOK || num(t, out, "chargedAmount") != actual {
						t.Errorf("finish %s: %d %v", g.id, code, out)
					}
				})
			}
			wg.Wait()
			for _, s := range via {
				st, _ := getStatus(t, s, r)
				if st.used != sum || st.reserved != 0 || st.active != 0 || st.remaining != limit-sum {
					t.Fatalf("status via %s after finishes: %+v; want used %d", s.URL, st, sum)
				}
			}
			charged, reserved, rows := ledgerSums(t, b, r)
			if charged != sum || reserved != 0 || rows != want {
				t.Fatalf("ledger after finishes: charged %d reserved %d rows %d; want %d 0 %d", charged, reserved, rows, sum, want)
			}
		})
	}
}

func TestTwoInstancesSweepALeakOnce(t *testing.T) {
	for _, m := range testenv.Modes() {
		t.Run(string(m), func(t *testing.T) {
			a, b := twoInstances(t, m)
			via := []*testenv.Server{a, b}
			r := sharedResource(t)
			const n, amount = 40, 25
			putPolicy(t, b, r, map[string]any{"quotaType": "DURATION", "totalLimit": 100000, "leakThresholdSeconds": 1})
			ids := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					code, out := callRetry(t, via[i%2], "/quota/apply", map[string]any{
						"resourceName": r, "applyAmount": amount, "sessionId": fmt.Sprintf("leak-%03d", i)})
					if code != http.StatusOK {
						t.Errorf("apply: %d %v", code, out)
						return
					}
					ids[i] = out["sessionId"].(string)
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}

			// Both instances sweep every 100ms; nobody heartbeats.
			testenv.Eventually(t, 15*time.Second, "every ledger row to be LEAKED", func() bool {
				var leaked int
				_ = a.Ledger.QueryRow("SELECT COUNT(*) FROM quota_usage WHERE resource_name = ? AND status = 'LEAKED'", r).Scan(&leaked)
				return leaked == n
			})
			// Let a few more sweep passes run on both.
			time.Sleep(500 * time.Millisecond)
			for _, s := range via {
				st, _ := getStatus(t, s, r)
				if st.used != n*amount || st.reserved != 0 || st.active != 0 {
					t.Fatalf("status via %s: %+v; want each grant charged once (used %d)", s.URL, st, n*amount)
				}
			}
			charged, reserved, rows := ledgerSums(t, a, r)
			if charged != n*amount || reserved != 0 || rows != n {
				t.Fatalf("ledger: charged %d reserved %d rows %d; want %d 0 %d", charged, reserved, rows, n*amount, n)
			}
			la, lb := leakedCount(t, a, r), leakedCount(t, b, r)
			if la+lb != n {
				t.Fatalf("sessions swept: %d by one instance + %d by the other; want %d in all (each once)", la, lb, n)
			}
			t.Logf("swept %d by instance a, %d by instance b", la, lb)

			// A late finish through either instance trues a leak up once.
			id := ids[0]
			for i := range 2 {
				code, f, _ := call(t, via[i], http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": id, "actualUsedAmount": 10})
				if code != http.StatusOK || num(t, f, "chargedAmount") != 10 || num(t, f, "refundedAmount") != amount-10 {
					t.Fatalf("late finish %d: %d %v", i, code, f)
				}
			}
			st, _ := getStatus(t, b, r)
			charged, _, _ = ledgerSums(t, b, r)
			if want := int64(n*amount - (amount - 10)); st.used != want || charged != want {
				t.Fatalf("after the true-up: status used %d, ledger charged %d; want %d", st.used, charged, want)
			}
			var status string
			var recovered int
			if err := a.Ledger.QueryRow("SELECT status, leak_recovered FROM quota_usage WHERE session_id = ?", id).Scan(&status, &recovered); err != nil {
				t.Fatal(err)
			}
			if status != "FINISHED" || recovered != 1 {
				t.Fatalf("trued-up row: status %s, leak_recovered %d", status, recovered)
			}
		})
	}
}
