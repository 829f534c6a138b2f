package app

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// events records what happened, in order, from any goroutine.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// testInstance is an instance on 127.0.0.1:0 whose every step records an
// event: /readyz turning 503 ("not ready"), the HTTP server beginning its
// Shutdown ("http shutdown"), a request in flight across that shutdown
// finishing ("request done"), each loop stopping ("<name> stopped") and the
// closers ("close redis", "close mysql").
func testInstance(t *testing.T, ev *events, loops ...loop) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shutdown := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		ev.add("request started")
		<-shutdown // held across the start of Shutdown, which must wait for it
		ev.add("request done")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	srv.RegisterOnShutdown(func() { ev.add("http shutdown"); close(shutdown) })
	return &instance{
		log: zap.NewNop(), grace: 10 * time.Second,
		notReady: func() { ev.add("not ready") },
		srv:      srv, ln: ln, loops: loops,
		closers: []func(){func() { ev.add("close redis") }, func() { ev.add("close mysql") }},
	}
}

// idleLoop runs until it is stopped and records that.
func idleLoop(ev *events, name string) loop {
	return loop{name, func(ctx context.Context) error {
		<-ctx.Done()
		ev.add(name + " stopped")
		return nil
	}}
}

func TestRunStopsInTheHouseOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ev := &events{}
	in := testInstance(t, ev, idleLoop(ev, "sweeper"), idleLoop(ev, "reconcile"))
	addr := "http://" + in.ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.run(ctx) }()

	reqDone := make(chan error, 1)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	go func() {
		resp, err := client.Get(addr + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		reqDone <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(ev.all(), "request started") {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the handler")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after ctx's end = %v, want nil", err)
	}
	if err := <-reqDone; err != nil {
		t.Fatalf("the request in flight at shutdown failed: %v", err)
	}
	got := ev.all()
	want := []string{"request started", "not ready", "http shutdown", "request done"}
	if !slices.Equal(got[:4], want) {
		t.Fatalf("events %v, want them to begin with %v", got, want)
	}
	loopsStopped := got[4:6]
	slices.Sort(loopsStopped)
	if !slices.Equal(loopsStopped, []string{"reconcile stopped", "sweeper stopped"}) || !slices.Equal(got[6:], []string{"close redis", "close mysql"}) {
		t.Fatalf("events %v: want both loops stopped after the HTTP server, then Redis closed, then MySQL", got)
	}
}

func TestALoopThatDiesStopsRunWithItsError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		give func(ctx context.Context) error
		want string
	}{
		{"an error", func(context.Context) error { return boom }, "loop failing: boom"},
		{"a return before it was stopped", func(context.Context) error { return nil }, "loop failing: returned before it was stopped"},
		{"a panic", func(context.Context) error { panic("nil map") }, "loop failing panicked: nil map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ev := &events{}
			in := testInstance(t, ev, idleLoop(ev, "sweeper"), loop{"failing", tt.give})
			err := in.run(context.Background())
			if err == nil || err.Error() != tt.want {
				t.Fatalf("run = %v, want %q", err, tt.want)
			}
			if tt.name == "an error" && !errors.Is(err, boom) {
				t.Fatalf("run = %v, want it to wrap the loop's error", err)
			}
			// The shutdown hook runs on a goroutine of its own (no request
			// orders it here), so it is left out; that the server was shut
			// down shows in its listener, closed.
			got := strings.Join(slices.DeleteFunc(ev.all(), func(e string) bool { return e == "http shutdown" }), ", ")
			if want := "not ready, sweeper stopped, close redis, close mysql"; got != want {
				t.Fatalf("events %q, want %q: the whole process stops in order", got, want)
			}
			if c, err := net.Dial("tcp", in.ln.Addr().String()); err == nil {
				c.Close()
				t.Fatal("the HTTP listener still accepts after run returned")
			}
		})
	}
}

func TestALoopStoppedOnPurposeIsNotAnError(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ev := &events{}
	canceled := loop{"reconcile", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	in := testInstance(t, ev, canceled)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := in.run(ctx); err != nil {
		t.Fatalf("run = %v, want nil: a loop that returns context.Canceled when stopped did not die", err)
	}
}

func TestAFailingHTTPServerStopsRunWithoutADrain(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ev := &events{}
	in := testInstance(t, ev, idleLoop(ev, "sweeper"))
	_ = in.ln.Close() // Serve fails at once on a closed listener
	err := in.run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "http server: ") {
		t.Fatalf("run = %v, want the http server's error", err)
	}
	if got := strings.Join(ev.all(), ", "); got != "sweeper stopped, close redis, close mysql" {
		t.Fatalf("events %q", got)
	}
}

// TestServeLeavesNoGoroutineBehind, under each HTTP engine. fasthttp keeps
// one goroutine per process that refreshes its Date header every second
// (started by the first server, never stopped): ignored by name. Its worker
// pool's cleaner has ended when Serve returns (httpserve waits for it); the
// check still retries for up to 3 s, as goroutines of closed clients end.
func TestServeLeavesNoGoroutineBehind(t *testing.T) {
	for _, engine := range []string{"fasthttp", "net/http"} {
		t.Run(strings.ReplaceAll(engine, "/", ""), func(t *testing.T) {
			opts := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1")}
			defer func() {
				for deadline := time.Now().Add(3 * time.Second); goleak.Find(opts...) != nil && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond)
				}
				goleak.VerifyNone(t, opts...)
			}()
			ctx, cancel := context.WithCancel(context.Background())
			addr := make(chan string, 1)
			done := make(chan error, 1)
			go func() {
				done <- Serve(ctx, []string{"--http-addr", "127.0.0.1:0", "--log-level", "error", "--http-engine", engine,
					"--dev-sqlite-path", t.TempDir() + "/l.db"}, io.Discard, func(a string) { addr <- a })
			}()
			client := &http.Client{Transport: &http.Transport{}}
			resp, err := client.Get("http://" + <-addr + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			client.CloseIdleConnections()
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("serve stopped with %v", err)
			}
		})
	}
}
