package app_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Benchmarks of the full HTTP stack: app.Serve (router, middleware, service,
// Redis scripts, ledger) on a loopback listener in this process, driven by a
// keep-alive client one request at a time. They run on the dev-mode backends
// (miniredis + SQLite) and on the machine's real Redis and MariaDB (skipped
// when those are not reachable, like the real-backend tests).
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/app/
//
// allocs/op and B/op are the whole process's: the client's and the server's
// share of one operation, plus whatever background work (sweeper, metrics
// collector) happened meanwhile. -benchtime=1x keeps them quick; `go test`
// without -bench does not run them.

// benchModes runs fn once per backend mode, each on a fresh server with a
// never-resetting policy whose limit is never reached.
func benchModes(b *testing.B, fn func(b *testing.B, c *benchClient)) {
	for _, m := range testenv.Modes() {
		b.Run(string(m), func(b *testing.B) {
			s := testenv.Start(b, m)
			res := testenv.Resource(b)
			putPolicy(b, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": quota.MaxAmount})
			c := &benchClient{base: s.URL, res: res, prefix: "bench-" + testenv.RandomSuffix() + "-",
				http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}}
			b.Cleanup(c.http.CloseIdleConnections)
			// One untimed session first: policy cache, period seeding, pools.
			id := c.id(-1)
			c.post(b, "/quota/apply", c.applyBody(id))
			c.post(b, "/quota/finish", c.finishBody(id))
			// b.Loop in fn runs the body once and resets the timer at its
			// first call, so the set-up above is neither repeated nor timed.
			b.ReportAllocs()
			fn(b, c)
		})
	}
}

type benchClient struct {
	base, res, prefix string
	http              *http.Client
	buf               bytes.Buffer
}

func (c *benchClient) id(i int) string { return c.prefix + strconv.Itoa(i) }

func (c *benchClient) applyBody(id string) []byte {
	return []byte(`{"resourceName":"` + c.res + `","applyAmount":1,"sessionId":"` + id + `"}`)
}

func (c *benchClient) heartbeatBody(id string) []byte {
	return []byte(`{"resourceName":"` + c.res + `","sessionId":"` + id + `"}`)
}

func (c *benchClient) finishBody(id string) []byte {
	return []byte(`{"resourceName":"` + c.res + `","sessionId":"` + id + `","actualUsedAmount":1}`)
}

// post sends one JSON POST and fails the benchmark on anything but 200.
func (c *benchClient) post(b *testing.B, path string, body []byte) {
	req, err := http.NewRequest(http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		b.Fatalf("POST %s: %v", path, err)
	}
	c.buf.Reset()
	_, _ = io.Copy(&c.buf, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("POST %s: %d %s", path, resp.StatusCode, c.buf.String())
	}
}

// BenchmarkApply: one apply per op, a fresh client-chosen session id each.
func BenchmarkApply(b *testing.B) {
	benchModes(b, func(b *testing.B, c *benchClient) {
		for i := 0; b.Loop(); i++ {
			c.post(b, "/quota/apply", c.applyBody(c.id(i)))
		}
	})
}

// BenchmarkApplyFinish: one whole session (apply then finish) per op.
func BenchmarkApplyFinish(b *testing.B) {
	benchModes(b, func(b *testing.B, c *benchClient) {
		for i := 0; b.Loop(); i++ {
			id := c.id(i)
			c.post(b, "/quota/apply", c.applyBody(id))
			c.post(b, "/quota/finish", c.finishBody(id))
		}
	})
}

// BenchmarkHeartbeat: one heartbeat per op on one open session.
func BenchmarkHeartbeat(b *testing.B) {
	benchModes(b, func(b *testing.B, c *benchClient) {
		id := c.id(-2)
		c.post(b, "/quota/apply", c.applyBody(id))
		body := c.heartbeatBody(id)
		for b.Loop() {
			c.post(b, "/quota/heartbeat", body)
		}
	})
}
