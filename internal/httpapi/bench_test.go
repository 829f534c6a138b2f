package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Handler benchmarks: this package's router, middleware, decoding,
// validation, quota.Service and metrics, called through Handler().ServeHTTP
// with an httptest recorder; the backends are in-memory stand-ins that
// answer at once, so ns/op, B/op and allocs/op are this process's own work
// per request, without sockets, Redis or SQL. scripts/bench.sh runs them
// with -benchmem and, given QC_BENCH_BEFORE=<rev>, runs this same file on
// that revision too and compares the two with benchstat.
//
//	go test -run '^$' -bench . -benchmem ./internal/httpapi/

// benchBalances answers the hot-path calls of quota.BalanceStore at once.
// Any other method panics (nil embedded interface): the benchmarks do not
// reach them.
type benchBalances struct{ quota.BalanceStore }

func (benchBalances) Apply(_ context.Context, c quota.ApplyCmd) (quota.ApplyResult, error) {
	now := time.Now()
	return quota.ApplyResult{
		Outcome: quota.ApplyGranted, Granted: c.Amount, Remaining: 1 << 40,
		LeaseExpiresAt: now.Add(c.Lease), StartTime: now, PeriodStart: c.Period.Start, Now: now,
	}, nil
}

func (benchBalances) Heartbeat(_ context.Context, _, _, _ string, lease time.Duration) (time.Time, error) {
	return time.Now().Add(lease), nil
}

func (benchBalances) Finish(_ context.Context, c quota.FinishCmd) (quota.FinishResult, error) {
	now := time.Now()
	return quota.FinishResult{
		Granted: c.Actual, Charged: c.Actual, Remaining: 1 << 40,
		StartTime: now, EndTime: now,
	}, nil
}

type benchLedger struct{ quota.Ledger }

func (benchLedger) InsertSession(context.Context, quota.UsageRecord) error { return nil }
func (benchLedger) FinishSession(context.Context, quota.UsageRecord) error { return nil }

// InsertSessionBefore: the ledger's insert with a deadline of its own, as
// *mysqlstore.Store has it (app.Serve sets quota.Options.InsertSessionBefore).
func (benchLedger) InsertSessionBefore(context.Context, time.Time, quota.UsageRecord) error {
	return nil
}

type benchPolicies struct {
	quota.PolicyStore
	p quota.Policy
}

func (s benchPolicies) GetPolicy(context.Context, string) (quota.Policy, error) { return s.p, nil }

// benchHandler is the HTTP handler over the stand-ins, wired as app.Serve
// wires it (metrics included), for one never-resetting COUNT policy.
func benchHandler(b *testing.B) (http.Handler, string) {
	const res = "bench-handler"
	pol := quota.Policy{
		ResourceName: res, QuotaType: "COUNT", TotalLimit: quota.MaxAmount, Timezone: "UTC",
		LeakThresholdSeconds: 300, CreatedAt: time.Now().Add(-time.Hour), UpdatedAt: time.Now().Add(-time.Hour),
	}
	svc := quota.NewService(benchBalances{}, benchLedger{}, benchPolicies{p: pol}, &period.Scheduler{}, quota.Options{InsertSessionBefore: benchLedger{}.InsertSessionBefore})
	reg := prometheus.NewRegistry()
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(reg), Gatherer: reg})
	return srv.Handler(), res
}

// serve posts body to path and fails the benchmark on anything but 200.
func serve(b *testing.B, h http.Handler, path string, body []byte) {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
	}
}

// BenchmarkHandlerApply: one apply per op, a fresh session id each.
func BenchmarkHandlerApply(b *testing.B) {
	h, res := benchHandler(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		serve(b, h, "/quota/apply", []byte(`{"resourceName":"`+res+`","applyAmount":1,"sessionId":"s-`+strconv.Itoa(i)+`"}`))
	}
}

// BenchmarkHandlerHeartbeat: one heartbeat per op.
func BenchmarkHandlerHeartbeat(b *testing.B) {
	h, res := benchHandler(b)
	body := []byte(`{"resourceName":"` + res + `","sessionId":"s-1"}`)
	b.ReportAllocs()
	for b.Loop() {
		serve(b, h, "/quota/heartbeat", body)
	}
}

// BenchmarkHandlerFinish: one finish per op.
func BenchmarkHandlerFinish(b *testing.B) {
	h, res := benchHandler(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		serve(b, h, "/quota/finish", []byte(`{"resourceName":"`+res+`","sessionId":"s-`+strconv.Itoa(i)+`","actualUsedAmount":1}`))
	}
}

// benchWriter is a ResponseWriter reused across ops (its header map
// cleared, its body dropped), so that allocs/op count none of its own.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.h }

func (w *benchWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(p)
	return len(p), nil
}

// BenchmarkHandlerApplyAsWrk: the apply scripts/wrk/apply.lua sends (a
// clientId; the server makes the session id), with the request and the
// ResponseWriter reused across ops, so that B/op and allocs/op are the
// handler path's own (router, middleware, decoding, validation,
// quota.Service, metrics, the answer) and not httptest's. Load-independent
// figures for docs/performance.md (issue 23 §3 (a)).
func BenchmarkHandlerApplyAsWrk(b *testing.B) {
	h, res := benchHandler(b)
	body := []byte(`{"resourceName":"` + res + `","applyAmount":1,"clientId":"wrk"}`)
	req := httptest.NewRequest(http.MethodPost, "/quota/apply", nil)
	req.Header.Set("Content-Type", "application/json")
	rd := bytes.NewReader(body)
	rc := io.NopCloser(rd)
	w := &benchWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		req.Body, req.ContentLength = rc, int64(len(body))
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("POST /quota/apply: %d", w.status)
		}
	}
}
