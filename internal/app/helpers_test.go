package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/redisstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// call sends a JSON request and decodes the JSON answer.
func call(tb testing.TB, s *testenv.Server, method, path string, body any) (int, map[string]any, http.Header) {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.AdminToken != "" && strings.HasPrefix(path, "/admin/") {
		req.Header.Set("Authorization", "Bearer "+s.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(raw) > 0 && raw[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&out); err != nil {
			tb.Fatalf("%s %s: bad JSON %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, out, resp.Header
}

func num(tb testing.TB, m map[string]any, k string) int64 {
	tb.Helper()
	n, ok := m[k].(json.Number)
	if !ok {
		tb.Fatalf("field %s missing or not a number in %v", k, m)
	}
	v, err := n.Int64()
	if err != nil {
		tb.Fatalf("field %s: %v", k, err)
	}
	return v
}

func putPolicy(tb testing.TB, s *testenv.Server, name string, body map[string]any) {
	tb.Helper()
	code, out, _ := call(tb, s, http.MethodPut, "/admin/policies/"+name, body)
	if code != http.StatusOK && code != http.StatusCreated {
		tb.Fatalf("put policy: %d %v", code, out)
	}
}

type status struct{ used, reserved, remaining, active, limit int64 }

func getStatus(tb testing.TB, s *testenv.Server, name string) (status, map[string]any) {
	tb.Helper()
	code, out, _ := call(tb, s, http.MethodGet, "/quota/status?resourceName="+name, nil)
	if code != http.StatusOK {
		tb.Fatalf("status: %d %v", code, out)
	}
	return statusOf(tb, out), out
}

// statusOf reads the figures of a status answer.
func statusOf(tb testing.TB, out map[string]any) status {
	tb.Helper()
	return status{
		used: num(tb, out, "usedAmount"), reserved: num(tb, out, "reservedAmount"),
		remaining: num(tb, out, "remainingQuota"), active: num(tb, out, "activeSessions"),
		limit: num(tb, out, "totalLimit"),
	}
}

// ledgerSums reads the ledger directly: charged of settled rows and
// reserved (grants) of USING rows for a resource.
func ledgerSums(tb testing.TB, s *testenv.Server, name string) (charged, reserved, rows int64) {
	tb.Helper()
	err := s.Ledger.QueryRow(`SELECT
		COALESCE(SUM(CASE WHEN status IN ('FINISHED','LEAKED') THEN charged_amount ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN status = 'USING' THEN charged_amount ELSE 0 END), 0),
		COUNT(*)
		FROM quota_usage WHERE resource_name = ?`, name).Scan(&charged, &reserved, &rows)
	if err != nil {
		tb.Fatalf("ledger sums: %v", err)
	}
	return charged, reserved, rows
}

func forModes(t *testing.T, fn func(t *testing.T, s *testenv.Server)) {
	forModesWith(t, nil, fn)
}

// forModesWith is forModes with extra server flags.
func forModesWith(t *testing.T, extra []string, fn func(t *testing.T, s *testenv.Server)) {
	for _, m := range testenv.Modes() {
		t.Run(string(m), func(t *testing.T) {
			fn(t, testenv.Start(t, m, extra...))
		})
	}
}

// realRedis is a client of the real Redis the Real-mode server uses, and a
// store on it (to hold locks or read keys as another instance would).
func realRedis(tb testing.TB) (*redis.Client, *redisstore.Store) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb, redisstore.New(rdb)
}

// startBehindMySQLProxy starts a Real-mode server whose MySQL is reached
// through a faults.Proxy (to cut it, drop or delay its answers), with the
// extra flags; it answers the server, the proxy and a direct connection to
// the same database (to read the ledger while the proxy is cut).
func startBehindMySQLProxy(t *testing.T, extra ...string) (*testenv.Server, *faults.Proxy, *sqlx.DB) {
	t.Helper()
	dsn := testenv.MustMySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faults.StartProxy(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg.Addr = p.Addr()
	s := testenv.Start(t, testenv.Real, append([]string{"--mysql-dsn", cfg.FormatDSN()}, extra...)...)
	ledger, err := sqlx.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	return s, p, ledger
}
