package httpserve_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/httpserve"
)

var engines = []string{httpserve.EngineFast, httpserve.EngineNetHTTP}

// forEngines runs fn once per engine, as a subtest named after it.
func forEngines(t *testing.T, fn func(t *testing.T, engine string)) {
	for _, e := range engines {
		t.Run(strings.ReplaceAll(e, "/", ""), func(t *testing.T) { fn(t, e) })
	}
}

// started is a Server serving on a loopback listener.
type started struct {
	srv    httpserve.Server
	addr   string
	served chan error // Serve's return
}

// start serves h with engine and o's limits (timeouts of a few seconds
// when o leaves them 0), stopped with Close at the test's end.
func start(t *testing.T, engine string, h http.Handler, o httpserve.Options) *started {
	t.Helper()
	o.Engine = engine
	if o.ReadTimeout == 0 {
		o.ReadHeaderTimeout, o.ReadTimeout, o.WriteTimeout, o.IdleTimeout = 5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	o.ErrorBody = httpapi.ErrorBody
	srv, err := httpserve.New(h, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &started{srv: srv, addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		select {
		case err := <-s.served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
			}
			s.served <- err
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return s
}

// raw writes req on a new connection and reads one answer. The connection
// is closed at the test's end.
func raw(t *testing.T, addr, req string) (reply, string) {
	t.Helper()
	c := dial(t, addr)
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, bufio.NewReader(c), req)
}

// dial connects to addr, with a 10 s deadline on the connection, closed at
// the test's end.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// reply is what a test reads of an answer besides its body (read whole and
// closed by readAnswer).
type reply struct {
	StatusCode int
	Header     http.Header
	Close      bool // Connection: close
}

// readAnswer reads one answer to req (whose method decides whether a body
// follows) from br.
func readAnswer(t *testing.T, br *bufio.Reader, req string) (reply, string) {
	t.Helper()
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", firstLine(req), err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %q: %v", firstLine(req), err)
	}
	_ = resp.Body.Close()
	return reply{resp.StatusCode, resp.Header, resp.Close}, string(b)
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return l }

// shutdownCtx is a context for Shutdown that ends with the test's budget.
func shutdownCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
