package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testcluster"
)

func TestMain(m *testing.M) {
	checkDeclaredKeys()
	goleak.VerifyTestMain(m)
}

const defaultTestRedisAddr = "127.0.0.1:6379"

// MustRedis returns a client of the Redis server at QC_TEST_REDIS_ADDR
// (default 127.0.0.1:6379), closed when the test ends. Tests share the
// server's DB 0 and keep apart by resource name (see newResource): every key
// is qc:{resource}:…. It skips the test when the server is unreachable, or
// fails it when QC_TEST_REQUIRE_BACKENDS=1.
func MustRedis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	addr := os.Getenv("QC_TEST_REDIS_ADDR")
	if addr == "" {
		addr = defaultTestRedisAddr
	}
	// Database 1: this package's keys only, so the cleanup SCANs stay cheap
	// whatever other test packages keep in database 0 meanwhile.
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: 1, DialTimeout: 2 * time.Second, PoolSize: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		const hint = "Redis not reachable at %s (%v): start it with " +
			"`redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save \"\" --appendonly no` " +
			"or set QC_TEST_REDIS_ADDR"
		if os.Getenv("QC_TEST_REQUIRE_BACKENDS") == "1" {
			tb.Fatalf(hint, addr, err)
		}
		tb.Skipf(hint, addr, err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// mustMiniredis starts an in-process miniredis (the dev-mode backend) and
// returns it with a client of it; both are closed when the test ends.
func mustMiniredis(tb testing.TB) (*miniredis.Miniredis, redis.UniversalClient) {
	tb.Helper()
	mr := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 64})
	tb.Cleanup(func() { _ = rdb.Close() }) // runs before miniredis' own Close (LIFO)
	return mr, rdb
}

// newResource returns a resource name unique to this test: t.Name() reduced
// to [a-z0-9_.-] plus a random suffix, at most 64 bytes. Its keys
// (qc:{res}*) are deleted when the test ends.
func newResource(tb testing.TB, rdb redis.UniversalClient) string {
	tb.Helper()
	var b strings.Builder
	for _, r := range strings.ToLower(tb.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 46 {
		name = name[len(name)-46:]
	}
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	res := name + "-" + hex.EncodeToString(suffix)
	if err := quota.ValidateResourceName(res); err != nil {
		tb.Fatalf("test resource name %q: %v", res, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		keys, err := scanKeys(ctx, rdb, prefix(res)+"*")
		if err != nil {
			if !errors.Is(err, redis.ErrClosed) {
				tb.Errorf("cleanup scan %s: %v", res, err)
			}
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("cleanup del %s: %v", res, err)
			}
		}
	})
	return res
}

// scanKeys lists the keys matching match on every master.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, match string) ([]string, error) {
	return testcluster.ScanKeys(ctx, rdb, match)
}

// env is one backend prepared for one (sub)test: a Store on a fresh
// resource name.
type env struct {
	backend string
	rdb     redis.UniversalClient
	s       *Store
	res     string
	mr      *miniredis.Miniredis // nil on real Redis
}

// sameClient returns a new client of e's server (or cluster), closed when
// the test ends; hooks added to it see only the calls made through it.
func (e *env) sameClient(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	var rdb redis.UniversalClient
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testcluster.Addrs(), PoolSize: 64})
	case *redis.Client:
		o := c.Options()
		rdb = redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, PoolSize: 64})
	default:
		tb.Fatalf("client %T", e.rdb)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// backendNames: every test runs on real Redis, on the test Redis Cluster
// (internal/testcluster: 3 masters, 3 replicas) and on miniredis, each with
// one round trip per call and with auto-pipelining.
var backendNames = []string{"redis", "cluster", "miniredis", "redis/pipelined", "cluster/pipelined", "miniredis/pipelined"}

// testPipelining is small so that the tests' concurrent calls fill
// pipelines and wait for slots, and spaced as quota-center's are, so that
// calls also wait for the interval since the last send.
var testPipelining = Pipelining{MaxCalls: 8, InFlight: 2, Interval: DefaultPipelining.Interval, Timeout: testPipelineTimeout, BatchApplies: true}

// testPipelineTimeout is the pipelines' time budget in tests that check
// what calls do, not how fast: miniredis compiles every script call, and
// under -race on a loaded machine 200 concurrent calls take longer than the
// production default (500ms). Tests of the timeout itself set their own.
const testPipelineTimeout = 5 * time.Second

// newEnv opens backend ("redis", "cluster" or "miniredis", "/pipelined"
// for auto-pipelining) for tb.
func newEnv(tb testing.TB, backend string) *env {
	tb.Helper()
	e := &env{backend: backend}
	server, mode, _ := strings.Cut(backend, "/")
	switch server {
	case "redis":
		e.rdb = MustRedis(tb)
	case "cluster":
		e.rdb = testcluster.Client(tb)
	case "miniredis":
		e.mr, e.rdb = mustMiniredis(tb)
	default:
		tb.Fatalf("unknown backend %q", backend)
	}
	// Cleanup of the keys is registered after the client's Close, so it
	// runs first (LIFO).
	e.res = newResource(tb, e.rdb)
	e.s = New(e.rdb)
	if mode == "pipelined" {
		e.s = NewPipelined(e.rdb, testPipelining)
		tb.Cleanup(e.s.Close) // before the client closes and the keys go (LIFO)
	}
	return e
}

// forEachBackend runs fn as a parallel subtest on real Redis and on
// miniredis, each with its own env.
func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	t.Parallel()
	for _, b := range backendNames {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, b))
		})
	}
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// now is the store's clock (Redis TIME), in ms.
func (e *env) now(tb testing.TB) time.Time {
	tb.Helper()
	t, err := e.rdb.Time(ctxT(tb)).Result()
	if err != nil {
		tb.Fatalf("TIME: %v", err)
	}
	return t.UTC().Truncate(time.Millisecond)
}

// current is a period around the store's clock: [now−1h, now+1h).
func (e *env) current(tb testing.TB) quota.Period {
	tb.Helper()
	now := e.now(tb)
	return quota.Period{Start: now.Add(-time.Hour), End: now.Add(time.Hour)}
}

func (e *env) seed(tb testing.TB, per quota.Period, limit int64, totals quota.PeriodTotals) {
	tb.Helper()
	wrote, err := e.s.Seed(ctxT(tb), e.res, per, limit, totals, nil, time.Minute)
	if err != nil {
		tb.Fatalf("Seed: %v", err)
	}
	if !wrote {
		tb.Fatalf("Seed: balance of period %d was already there", per.ID())
	}
}

func (e *env) balance(tb testing.TB, per quota.Period) quota.Balance {
	tb.Helper()
	b, err := e.s.Balance(ctxT(tb), e.res, per)
	if err != nil {
		tb.Fatalf("Balance: %v", err)
	}
	return b
}

// cmd is an ApplyCmd of e's resource in per with a 10-minute lease.
func (e *env) cmd(id string, amount, min int64, per quota.Period) quota.ApplyCmd {
	return quota.ApplyCmd{
		ResourceName: e.res, SessionID: id, ClientID: "client-1",
		Amount: amount, MinAmount: min, Period: per, Lease: 10 * time.Minute,
	}
}

func (e *env) apply(tb testing.TB, c quota.ApplyCmd) quota.ApplyResult {
	tb.Helper()
	r, err := e.s.Apply(ctxT(tb), c)
	if err != nil {
		tb.Fatalf("Apply %s: %v", c.SessionID, err)
	}
	return r
}

// grant applies and fails the test unless the store granted exactly want.
func (e *env) grant(tb testing.TB, c quota.ApplyCmd, want int64) quota.ApplyResult {
	tb.Helper()
	r := e.apply(tb, c)
	if r.Outcome != quota.ApplyGranted || r.Granted != want {
		tb.Fatalf("Apply %s: outcome %d granted %d, want granted %d", c.SessionID, r.Outcome, r.Granted, want)
	}
	return r
}

func (e *env) finish(tb testing.TB, id string, actual int64) quota.FinishResult {
	tb.Helper()
	r, err := e.s.Finish(ctxT(tb), quota.FinishCmd{ResourceName: e.res, SessionID: id, Actual: actual, Retention: time.Hour})
	if err != nil {
		tb.Fatalf("Finish %s: %v", id, err)
	}
	return r
}

func (e *env) session(tb testing.TB, id string) map[string]string {
	tb.Helper()
	m, err := e.rdb.HGetAll(ctxT(tb), sessionKey(e.res, id)).Result()
	if err != nil {
		tb.Fatalf("HGETALL session %s: %v", id, err)
	}
	return unpackSession(m)
}

func (e *env) sweep(tb testing.TB, max int) []quota.LeakedSession {
	tb.Helper()
	l, err := e.s.Sweep(ctxT(tb), e.res, max, time.Hour)
	if err != nil {
		tb.Fatalf("Sweep: %v", err)
	}
	return l
}

// waitSwept sweeps until the session id is swept (Fresh), failing after a
// deadline; other sessions swept on the way are returned too.
func (e *env) waitSwept(tb testing.TB, id string) (quota.LeakedSession, []quota.LeakedSession) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var all []quota.LeakedSession
	for {
		for _, l := range e.sweep(tb, 100) {
			if l.Fresh {
				all = append(all, l)
			}
			if l.SessionID == id && l.Fresh {
				return l, all
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("session %s not swept within 10s", id)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func wantBalance(tb testing.TB, got quota.Balance, limit, charged, reserved int64) {
	tb.Helper()
	if !got.Exists || got.Limit != limit || got.Charged != charged || got.Reserved != reserved {
		tb.Fatalf("balance = %+v, want exists limit %d charged %d reserved %d", got, limit, charged, reserved)
	}
}
