package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/quotacenter/quota-center/api/client"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Session ids are UUIDv7 made by the client, and the apply's retries carry
// the same one.
func TestSessionIDsAreClientMadeUUIDv7(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	fails := 1
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/quota/apply" {
			var in struct {
				SessionID string `json:"sessionId"`
			}
			body := readBody(t, r)
			_ = json.Unmarshal(body, &in)
			mu.Lock()
			ids = append(ids, in.SessionID)
			fail := fails > 0
			fails--
			mu.Unlock()
			if fail {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			r = r.Clone(r.Context())
			r.Body = nopBody(body)
		}
		center.serve(w, r)
	}))
	defer srv.Close()
	m, err := client.NewManager(srv.URL, quiet(), client.WithRetry(3, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	l, err := m.Acquire(context.Background(), "r", 5)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = l.Finish(context.Background(), 5) }()
	u, err := uuid.Parse(l.SessionID())
	if err != nil || u.Version() != 7 {
		t.Fatalf("session id %q: version %v, %v; want a UUIDv7", l.SessionID(), u.Version(), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] != l.SessionID() || ids[1] != l.SessionID() {
		t.Fatalf("applies sent with session ids %v, want the lease's %s twice (a 503, then the retry)", ids, l.SessionID())
	}
}

// The read timeout bounds a call whose answer does not come: the apply
// fails as the center being unavailable (a timeout), and the caller's
// resource falls back, instead of waiting.
func TestReadTimeoutEndsACallThatGetsNoAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	m, err := client.NewManager(srv.URL, quiet(), client.WithTimeouts(time.Second, 50*time.Millisecond),
		client.WithRetry(1, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = m.Acquire(ctx, "r", 1)
	var ne net.Error
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("apply with no answer: %v, want an UnavailableError from a timeout", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call ran into the caller's deadline instead of the read timeout")
	}
}

// A fail-closed resource refuses with the typed error, naming the op and
// the resource, and so does a Func fallback's *FallbackError carry what
// happened.
func TestFallbacksAreVisibleToTheCaller(t *testing.T) {
	fnErr := errors.New("cache miss")
	m, err := client.NewManager(downCenter(t), quiet(), client.WithRetry(1, time.Millisecond, time.Millisecond),
		client.WithFallback("f", client.Func(func(context.Context, string, int64, error) error { return fnErr })))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	_, err = m.Acquire(context.Background(), "closed", 3)
	var ue *client.UnavailableError
	if !errors.As(err, &ue) || ue.Op != "apply" || ue.Resource != "closed" || ue.Tries != 1 {
		t.Fatalf("fail-closed apply: %v", err)
	}
	err = m.Do(context.Background(), "f", 3, func(context.Context) (int64, error) {
		t.Error("fn ran although the Func fallback was taken")
		return 0, nil
	})
	var fe *client.FallbackError
	if !errors.As(err, &fe) || !errors.Is(err, client.ErrFallbackTaken) || !errors.Is(err, fnErr) || !errors.Is(err, client.ErrUnavailable) || fe.Amount != 3 {
		t.Fatalf("Func fallback: %v", err)
	}
}

// switchable is the fake center behind a switch: down answers 502.
type switchable struct {
	*httptest.Server
	down atomic.Bool
}

func newSwitchable(t *testing.T, f *fakeCenter) *switchable {
	t.Helper()
	s := &switchable{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		f.serve(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// Every client metric is on the caller's registry once it has something to
// say: central calls, breaker state, fallbacks, the leak guard, reports,
// pool takes (local hit ratio), units, refills, outage time, batch size.
func TestEveryClientMetricIsExported(t *testing.T) {
	center := newFakeCenter("TOKENS", 1000)
	defer center.Close()
	sw := newSwitchable(t, center)
	reg := prometheus.NewRegistry()
	m, err := client.NewManager(sw.URL, quiet(), client.WithRegistry(reg), client.WithLeakGuard(time.Millisecond),
		client.WithRetry(1, time.Millisecond, time.Millisecond), client.WithReportInterval(10*time.Millisecond),
		client.WithFallback("open", client.FailOpen()), client.WithBreaker(1000, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ctx := context.Background()
	p, err := m.LocalPool("r", client.WithBatch(10, 10, 10), client.WithOutage(client.OutageSafeRate, 1000), client.WithIdleReturn(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Take(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, "guarded", 1); err != nil { // never finished: the leak guard fires
		t.Fatal(err)
	}
	sw.down.Store(true)
	l, err := m.Acquire(ctx, "open", 2)
	if err != nil || !l.FailOpen() {
		t.Fatalf("fail-open acquire: %v", err)
	}
	if _, err := l.Finish(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// Spend what the pool holds: its refill fails and it goes to its safe rate.
	eventually(t, "the pool's outage mode", func() bool { _ = p.TryTake(1); return p.Mode() == "safe_rate" })
	want := []string{"quota_client_calls_total", "quota_client_breaker_state", "quota_client_fallbacks_total",
		"quota_client_leak_guard_total", "quota_client_pending_reports", "quota_client_pool_takes_total",
		"quota_client_pool_take_units_total", "quota_client_pool_refills_total", "quota_client_pool_fallback_seconds_total",
		"quota_client_pool_batch_size"}
	missing := func(names []string) []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, mf := range mfs {
			have[mf.GetName()] = true
		}
		var out []string
		for _, n := range names {
			if !have[n] {
				out = append(out, n)
			}
		}
		return out
	}
	for deadline := time.Now().Add(10 * time.Second); len(missing(want)) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not exported while the center is away: %v", missing(want))
		}
	}
	sw.down.Store(false)
	eventually(t, "the reports to be delivered", func() bool { return m.PendingReports() == 0 })
	if miss := missing([]string{"quota_client_reports_total"}); len(miss) > 0 {
		t.Fatalf("missing %v", miss)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A pool sends at most one batch apply at a time, however many takes wait,
// and grows its batch to the observed rate × the target period.
func TestPoolRefillsOneAtATimeAndGrowsItsBatchWithTheRate(t *testing.T) {
	center := newFakeCenter("TOKENS", client.MaxAmount)
	defer center.Close()
	var inFlight, worst atomic.Int64
	var mu sync.Mutex
	var sizes []int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/quota/apply" {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				w := worst.Load()
				if n <= w || worst.CompareAndSwap(w, n) {
					break
				}
			}
			body := readBody(t, r)
			var in struct {
				ApplyAmount int64 `json:"applyAmount"`
			}
			_ = json.Unmarshal(body, &in)
			mu.Lock()
			sizes = append(sizes, in.ApplyAmount)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a slow center: takes pile up behind the refill
			r = r.Clone(r.Context())
			r.Body = nopBody(body)
		}
		center.serve(w, r)
	}))
	defer srv.Close()
	m, err := client.NewManager(srv.URL, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	p, err := m.LocalPool("r", client.WithBatch(20, 10, 100_000), client.WithTargetPeriod(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if err := p.Take(context.Background(), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := worst.Load(); w != 1 {
		t.Errorf("%d batch applies in flight at once, want 1", w)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) < 2 || sizes[0] != 20 {
		t.Fatalf("batch applies %v: want the first of 20, then more", sizes)
	}
	largest := int64(0)
	for _, s := range sizes {
		largest = max(largest, s)
	}
	if largest <= 20 || len(sizes) >= 16000/20 {
		t.Errorf("batch applies %v: the batch never grew with the rate (%d applies for 16000 takes)", sizes, len(sizes))
	}
	if used, _ := centerUsed(center); used != 16000 {
		t.Errorf("center used %d, want 16000", used)
	}
}

func readBody(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Error(err)
	}
	return b
}

func nopBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
