package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// stores are what a test Service runs on.
type stores struct {
	balances quota.BalanceStore
	ledger   quota.Ledger
	policies quota.PolicyStore
}

// testAPI is a real quota.Service behind httpapi, served by httptest.
type testAPI struct {
	URL string
	srv *httpapi.Server
}

// startAPI wires the Service, metrics and HTTP layer the way app.Serve does.
func startAPI(t *testing.T, st stores, log *zap.Logger) *testAPI {
	t.Helper()
	svc := quota.NewService(st.balances, st.ledger, st.policies, &period.Scheduler{}, quota.Options{})
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	httpapi.NewBalanceCollector(reg, svc, 2*time.Second)
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: log, Metrics: metrics, Gatherer: reg})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{URL: ts.URL, srv: srv}
}

// newMiniredis starts an in-process Redis (it runs the production Lua
// scripts) and returns a client for it.
func newMiniredis(t *testing.T) *redis.Client {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newSQLite opens and migrates a private in-memory SQLite ledger and policy
// store.
func newSQLite(t *testing.T) *mysqlstore.Store {
	t.Helper()
	st, err := mysqlstore.OpenSQLite(t.Context(), ":memory:", mysqlstore.Options{})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return st
}

// newHarness is the usual test server: miniredis and an in-memory SQLite.
func newHarness(t *testing.T) *testAPI {
	t.Helper()
	sql := newSQLite(t)
	return startAPI(t, stores{balances: redisstore.New(newMiniredis(t)), ledger: sql, policies: sql}, zap.NewNop())
}

// reply is one HTTP answer; body is the decoded JSON object (numbers kept
// as json.Number), nil when the body is not a JSON object.
type reply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// request describes one call. ctype "" means application/json; "none" sends
// no Content-Type; lines separated by "\n" send one Content-Type header each. A chunked body is sent without Content-Length.
type request struct {
	method, path, body, ctype string
	chunked                   bool
	encoding                  string // Content-Encoding ("" sends none)
}

func (a *testAPI) do(t *testing.T, rq request) reply {
	t.Helper()
	var rd io.Reader
	if rq.body != "" {
		rd = strings.NewReader(rq.body)
		if rq.chunked {
			rd = bufio.NewReader(rd) // unknown length: sent chunked
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), rq.method, a.URL+rq.path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	switch rq.ctype {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "none":
	default:
		for _, ct := range strings.Split(rq.ctype, "\n") { // several lines: one header each
			req.Header.Add("Content-Type", ct)
		}
	}
	if rq.encoding != "" {
		req.Header.Set("Content-Encoding", rq.encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", rq.method, rq.path, err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	if bytes.HasPrefix(raw, []byte("{")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&r.body); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v\n%s", rq.method, rq.path, err, raw)
		}
	}
	return r
}

func (a *testAPI) post(t *testing.T, path, body string) reply {
	t.Helper()
	return a.do(t, request{method: http.MethodPost, path: path, body: body})
}

func (a *testAPI) get(t *testing.T, path string) reply {
	t.Helper()
	return a.do(t, request{method: http.MethodGet, path: path})
}

// mustOK calls and fails the test unless the answer is 200 or 201.
func (a *testAPI) mustOK(t *testing.T, rq request) reply {
	t.Helper()
	r := a.do(t, rq)
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("%s %s %s: %d %s", rq.method, rq.path, rq.body, r.status, r.raw)
	}
	return r
}

func (a *testAPI) putPolicy(t *testing.T, name, body string) {
	t.Helper()
	a.mustOK(t, request{method: http.MethodPut, path: "/admin/policies/" + name, body: body})
}

func (a *testAPI) status(t *testing.T, name string) reply {
	t.Helper()
	return a.mustOK(t, request{method: http.MethodGet, path: "/quota/status?resourceName=" + name})
}

// num reads an integer field of a JSON answer.
func num(t *testing.T, r reply, field string) int64 {
	t.Helper()
	n, ok := r.body[field].(json.Number)
	if !ok {
		t.Fatalf("field %s missing or not a number in %s", field, r.raw)
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("field %s: %v", field, err)
	}
	return v
}

// obj builds a JSON object from fields made by kv, keeping their order (and
// any duplicates) exactly as given.
func obj(fields ...string) string { return "{" + strings.Join(fields, ",") + "}" }

// kv is one "key":value member; value is raw JSON.
func kv(key, rawValue string) string { return str(key) + ":" + rawValue }

// str is s as a JSON string.
func str(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// sample is one line of the Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads /metrics and parses the text format.
func (a *testAPI) scrape(t *testing.T) []sample {
	t.Helper()
	r := a.do(t, request{method: http.MethodGet, path: "/metrics", ctype: "none"})
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", r.status, r.raw)
	}
	var out []sample
	for _, line := range strings.Split(string(r.raw), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		s, ok := parseSample(line)
		if !ok {
			t.Fatalf("unparsable metrics line %q", line)
		}
		out = append(out, s)
	}
	return out
}

func parseSample(line string) (sample, bool) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, false
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for line[0] != '}' {
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return s, false
			}
			key := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			for {
				if line == "" {
					return s, false
				}
				c := line[0]
				line = line[1:]
				if c == '"' {
					break
				}
				if c == '\\' && line != "" {
					switch line[0] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[0])
					}
					line = line[1:]
					continue
				}
				val.WriteByte(c)
			}
			s.labels[key] = val.String()
			line = strings.TrimPrefix(line, ",")
			if line == "" {
				return s, false
			}
		}
		line = line[1:]
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
	return s, true
}

// find returns the value of the sample with that name and exactly those
// labels.
func find(samples []sample, name string, labels map[string]string) (float64, bool) {
next:
	for _, s := range samples {
		if s.name != name || len(s.labels) != len(labels) {
			continue
		}
		for k, v := range labels {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}
