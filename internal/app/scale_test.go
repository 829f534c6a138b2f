package app_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Scale test of issue 4 §4, "cost must not grow with the work": apply,
// heartbeat and finish cost the same with 1,000,000 rows in the ledger and
// 100,000 live sessions as on an empty database, and status reads no
// per-session data.
//
// It is heavy (about a minute of bulk loading), so it runs only on the real
// backends and only when asked:
//
//	QC_TEST_SCALE=1 go test -run TestScale -v ./internal/app/
//
// QC_TEST_SCALE_N sets the timed sessions per side (default 2000). It
// asserts correctness only; the timings are logged ("scale: …" lines) for
// docs/performance.md, never asserted (timing assertions flake).
const (
	scaleFillRows = 1_000_000 // ledger rows of other resources
	scaleLive     = 100_000   // live USING sessions of the measured resource
	scaleWarmup   = 100       // untimed sessions per side before the timed ones
	scaleRound    = 100       // timed sessions per side and round
)

func TestScaleCostDoesNotGrowWithTheWork(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test skipped in -short mode")
	}
	if os.Getenv("QC_TEST_SCALE") != "1" {
		t.Skip("scale test is heavy: set QC_TEST_SCALE=1 to run it")
	}
	n := 2000
	if v := os.Getenv("QC_TEST_SCALE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < scaleRound {
			t.Fatalf("QC_TEST_SCALE_N=%q: want a number ≥ %d", v, scaleRound)
		}
	}
	n -= n % scaleRound

	// Two servers on the real backends, each with its own database: "empty"
	// keeps an empty ledger, "after-fill" gets the 1,000,000 rows and the
	// 100,000 live sessions. Their timed work is interleaved in rounds
	// (empty, after-fill, after-fill, empty, …) so that whatever else loads
	// the machine meanwhile weighs on both alike.
	//
	// A 30s query timeout: rebuilding 100,000 live sessions reads them in one
	// query, which may take longer than the 2s default under -race on a
	// loaded machine. It changes what fails, not what anything costs.
	emptySrv := testenv.Start(t, testenv.Real, "--mysql-timeout", "30s")
	fullSrv := testenv.Start(t, testenv.Real, "--mysql-timeout", "30s")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	policy := map[string]any{"quotaType": "COUNT", "totalLimit": quota.MaxAmount, "leakThresholdSeconds": 3600}
	empty, full := testenv.Resource(t), testenv.Resource(t)
	t.Cleanup(func() { deleteResourceKeys(t, rdb, empty) })
	t.Cleanup(func() { deleteResourceKeys(t, rdb, full) })
	putPolicy(t, emptySrv, empty, policy)
	putPolicy(t, fullSrv, full, policy)

	// The fill: 1,000,000 settled and open rows of 100 other resources.
	start := time.Now()
	fillLedger(t, fullSrv.Ledger)
	fillTime := time.Since(start)

	// 100,000 live sessions of the measured resource: USING rows written to
	// the ledger in bulk, then brought into Redis by the service itself (the
	// first status finds no balance and seeds it from the ledger: totals and
	// every open session, with a fresh lease), so Redis holds exactly what a
	// rebuild produces.
	start = time.Now()
	insertLive(t, fullSrv.Ledger, full, scaleLive)
	liveInsertTime := time.Since(start)
	start = time.Now()
	st, _ := getStatus(t, fullSrv, full)
	seedTime := time.Since(start)
	if st.active != scaleLive || st.reserved != scaleLive || st.used != 0 {
		t.Fatalf("after the rebuild: status %+v; want %d active sessions holding %d", st, scaleLive, scaleLive)
	}
	getStatus(t, emptySrv, empty)

	// Timed work, interleaved.
	e, f := newScaleClient(emptySrv, empty, "e-"), newScaleClient(fullSrv, full, "f-")
	e.sessions(t, scaleWarmup, false)
	f.sessions(t, scaleWarmup, false)
	for i := range 10 {
		for _, c := range pairOrder(i, e, f) {
			c.statusCost(t, 20)
		}
	}
	eSweep, fSweep := sweepMeter(t, emptySrv), sweepMeter(t, fullSrv)
	for i := range n / scaleRound {
		for _, c := range pairOrder(i, e, f) {
			c.sessions(t, scaleRound, true)
		}
	}
	eSweepMean, fSweepMean := eSweep(t), fSweep(t)

	// Correctness: every session settled once, the live ones untouched, the
	// ledger agreeing with Redis, the ledger as big as intended.
	settled := int64(scaleWarmup + n)
	if st, _ := getStatus(t, emptySrv, empty); st.used != settled || st.reserved != 0 || st.active != 0 {
		t.Fatalf("empty: status %+v; want used %d, nothing reserved or active", st, settled)
	}
	if st, _ := getStatus(t, fullSrv, full); st.used != settled || st.reserved != scaleLive || st.active != scaleLive {
		t.Fatalf("after-fill: status %+v; want used %d, the %d live sessions untouched", st, settled, scaleLive)
	}
	for _, x := range []struct {
		s    *testenv.Server
		r    string
		rows int64
	}{{emptySrv, empty, settled}, {fullSrv, full, scaleFillRows + scaleLive + settled}} {
		st, _ := getStatus(t, x.s, x.r)
		charged, reserved, _ := ledgerSums(t, x.s, x.r)
		if charged != st.used || reserved != st.reserved {
			t.Fatalf("%s: ledger charged %d reserved %d, Redis used %d reserved %d", x.r, charged, reserved, st.used, st.reserved)
		}
		var rows int64
		if err := x.s.Ledger.Get(&rows, "SELECT COUNT(*) FROM quota_usage"); err != nil {
			t.Fatal(err)
		}
		if rows != x.rows {
			t.Fatalf("%s: the ledger holds %d rows; want %d", x.r, rows, x.rows)
		}
	}

	t.Logf("scale: setup: %d ledger rows of other resources written in %s; %d live USING rows in %s; "+
		"rebuilt into Redis by the service (first status) in %s; %d timed sessions per side in rounds of %d, interleaved",
		scaleFillRows, fillTime.Round(time.Millisecond), scaleLive, liveInsertTime.Round(time.Millisecond),
		seedTime.Round(time.Millisecond), n, scaleRound)
	for _, op := range []struct {
		name        string
		empty, full []time.Duration
	}{
		{"apply", e.cost.apply, f.cost.apply},
		{"heartbeat", e.cost.heartbeat, f.cost.heartbeat},
		{"finish", e.cost.finish, f.cost.finish},
		{"session", e.cost.session, f.cost.session},
		{"status", e.cost.status, f.cost.status},
	} {
		e, f := summarize(op.empty), summarize(op.full)
		t.Logf("scale: %-9s empty p50=%s p90=%s p99=%s mean=%s | after-fill p50=%s p90=%s p99=%s mean=%s | after/empty p50 %.2f mean %.2f",
			op.name, ms(e.p50), ms(e.p90), ms(e.p99), ms(e.mean), ms(f.p50), ms(f.p90), ms(f.p99), ms(f.mean),
			float64(f.p50)/float64(e.p50), float64(f.mean)/float64(e.mean))
	}
	t.Logf("scale: sweep pass mean (every 100ms, all resources) empty=%s after-fill=%s", ms(eSweepMean), ms(fSweepMean))
}

// pairOrder alternates which of a and b goes first: a b, b a, a b, …
func pairOrder(i int, a, b *scaleClient) []*scaleClient {
	if i%2 == 0 {
		return []*scaleClient{a, b}
	}
	return []*scaleClient{b, a}
}

// fillLedger writes scaleFillRows rows of 100 other resources ("fill-00" …
// "fill-99") straight into quota_usage with INSERT … SELECT over a
// 1,000-row sequence, 100,000 rows per statement: 90% FINISHED, 6% LEAKED,
// 4% USING (open sessions of resources this server has no policy for), spread
// over 30 daily periods.
func fillLedger(t *testing.T, db *sqlx.DB) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("fill: %v\n%s", err, q)
		}
	}
	makeSeq(t, conn)
	// The rows are new and their ids unique by construction: skip the
	// unique-index read-before-write (this connection only).
	exec("SET SESSION unique_checks = 0")
	defer exec("SET SESSION unique_checks = 1")
	const perStatement = 100_000
	for lo := 0; lo < scaleFillRows/1000; lo += perStatement / 1000 {
		exec(`INSERT INTO quota_usage (resource_name, client_id, session_id, period_start_ms, apply_amount,
			min_amount, granted_amount, charged_amount, refunded_amount, overage_amount, start_ms, end_ms, status)
			SELECT CONCAT('fill-', LPAD(a.n % 100, 2, '0')), 'fill', CONCAT('fill-', a.n, '-', b.n),
				1700000000000 + (b.n % 30) * 86400000, 10, 0, 10,
				CASE WHEN b.n % 50 < 45 THEN 7 ELSE 10 END,
				CASE WHEN b.n % 50 < 45 THEN 3 ELSE 0 END, 0,
				1700000000000 + (b.n % 30) * 86400000 + a.n * 1000,
				CASE WHEN b.n % 50 < 48 THEN 1700000000000 + (b.n % 30) * 86400000 + a.n * 1000 + 60000 END,
				CASE WHEN b.n % 50 < 45 THEN 'FINISHED' WHEN b.n % 50 < 48 THEN 'LEAKED' ELSE 'USING' END
			FROM scale_seq a CROSS JOIN scale_seq b WHERE a.n >= ? AND a.n < ?`, lo, lo+perStatement/1000)
	}
}

// insertLive writes n USING rows of resource (granted 1 each) in the
// policy's current period: a policy without resetCron has one period, from
// its creation.
func insertLive(t *testing.T, db *sqlx.DB, resource string, n int) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	makeSeq(t, conn)
	var periodStart int64
	if err := conn.GetContext(ctx, &periodStart, "SELECT created_ms FROM quota_policy WHERE resource_name = ?", resource); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if _, err := conn.ExecContext(ctx, `INSERT INTO quota_usage (resource_name, client_id, session_id,
		period_start_ms, apply_amount, min_amount, granted_amount, charged_amount, start_ms, status)
		SELECT ?, 'scale', CONCAT('live-', a.n * 1000 + b.n), ?, 1, 0, 1, 1, ?, 'USING'
		FROM scale_seq a CROSS JOIN scale_seq b WHERE a.n < ?`, resource, periodStart, now, n/1000); err != nil {
		t.Fatalf("insert live sessions: %v", err)
	}
}

// makeSeq creates scale_seq(n) holding 0 … 999, once per database.
func makeSeq(t *testing.T, conn *sqlx.Conn) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS scale_seq (n INT NOT NULL PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("INSERT IGNORE INTO scale_seq (n) VALUES (0)")
	for i := 1; i < 1000; i++ {
		fmt.Fprintf(&b, ",(%d)", i)
	}
	if _, err := conn.ExecContext(ctx, b.String()); err != nil {
		t.Fatal(err)
	}
}

// deleteResourceKeys removes a resource's keys from the shared Redis (100,000
// session hashes would otherwise outlive the test): SCAN by the resource's
// hash-tagged prefix, UNLINK in batches. Test clean-up only.
func deleteResourceKeys(t *testing.T, rdb *redis.Client, resource string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := rdb.Scan(ctx, 0, "qc:{"+resource+"}:*", 5000).Iterator()
	batch := make([]string, 0, 5000)
	flush := func() {
		if len(batch) > 0 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				t.Errorf("unlink %s keys: %v", resource, err)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s keys: %v", resource, err)
	}
}

// scaleClient times requests to one server and resource on one keep-alive
// connection, one at a time, and keeps the durations.
type scaleClient struct {
	base, resource, prefix string
	next                   int // session number
	http                   *http.Client
	buf                    bytes.Buffer
	cost                   scaleCost
}

// scaleCost holds per-request durations; session is apply+heartbeat+finish.
type scaleCost struct {
	apply, heartbeat, finish, session, status []time.Duration
}

func newScaleClient(s *testenv.Server, resource, prefix string) *scaleClient {
	return &scaleClient{
		base: s.URL, resource: resource, prefix: testenv.RandomSuffix() + "-" + prefix,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}},
	}
}

// do sends one request, fails the test on anything but 200, and returns how
// long it took (request written to body read).
func (c *scaleClient) do(t *testing.T, method, path string, body []byte) time.Duration {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	c.buf.Reset()
	_, _ = io.Copy(&c.buf, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, c.buf.String())
	}
	return d
}

// sessions runs n sessions one after another: apply 1 → heartbeat → finish
// with 1 used, keeping the durations when timed.
func (c *scaleClient) sessions(t *testing.T, n int, timed bool) {
	t.Helper()
	for range n {
		sid := c.prefix + strconv.Itoa(c.next)
		c.next++
		a := c.do(t, http.MethodPost, "/quota/apply", []byte(`{"resourceName":"`+c.resource+`","applyAmount":1,"sessionId":"`+sid+`"}`))
		h := c.do(t, http.MethodPost, "/quota/heartbeat", []byte(`{"resourceName":"`+c.resource+`","sessionId":"`+sid+`"}`))
		f := c.do(t, http.MethodPost, "/quota/finish", []byte(`{"resourceName":"`+c.resource+`","sessionId":"`+sid+`","actualUsedAmount":1}`))
		if timed {
			c.cost.apply = append(c.cost.apply, a)
			c.cost.heartbeat = append(c.cost.heartbeat, h)
			c.cost.finish = append(c.cost.finish, f)
			c.cost.session = append(c.cost.session, a+h+f)
		}
	}
}

// statusCost times n status reads.
func (c *scaleClient) statusCost(t *testing.T, n int) {
	t.Helper()
	for range n {
		c.cost.status = append(c.cost.status, c.do(t, http.MethodGet, "/quota/status?resourceName="+c.resource, nil))
	}
}

// sweepMeter reads quota_sweep_duration_seconds now; the function it returns
// gives the mean sweep pass duration since.
func sweepMeter(t *testing.T, s *testenv.Server) func(t *testing.T) time.Duration {
	sum0, n0 := sweepTotals(t, s)
	return func(t *testing.T) time.Duration {
		sum, n := sweepTotals(t, s)
		if n <= n0 {
			return 0
		}
		return time.Duration((sum - sum0) / (n - n0) * float64(time.Second))
	}
}

// sweepTotals reads the sum and count of quota_sweep_duration_seconds.
func sweepTotals(t *testing.T, s *testenv.Server) (sum, count float64) {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "quota_sweep_duration_seconds_sum "); ok {
			sum, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(line, "quota_sweep_duration_seconds_count "); ok {
			count, _ = strconv.ParseFloat(v, 64)
		}
	}
	return sum, count
}

type summary struct{ p50, p90, p99, mean time.Duration }

func summarize(d []time.Duration) summary {
	s := slices.Clone(d)
	slices.Sort(s)
	var total time.Duration
	for _, v := range s {
		total += v
	}
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return summary{p50: at(0.50), p90: at(0.90), p99: at(0.99), mean: total / time.Duration(len(s))}
}

// ms formats d in milliseconds with microsecond precision.
func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
