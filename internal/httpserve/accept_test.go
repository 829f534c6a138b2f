package httpserve_test

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/httpserve"
)

// failingListener's Accept fails with EMFILE (the process is out of file
// descriptors: a flood of connections) its first fails times, then
// accepts.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestATemporaryAcceptErrorIsRetried: running out of file descriptors for
// a moment (EMFILE) does not end Serve, under both engines: net/http waits
// and accepts again, and so must EngineFast. A Serve that returned would
// stop the process (internal/app's run takes it for the HTTP server
// failing), letting a burst of connections take an instance down.
func TestATemporaryAcceptErrorIsRetried(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		srv, err := httpserve.New(echo, httpserve.Options{Engine: engine, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
			IdleTimeout: 5 * time.Second, MaxBodyBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := &failingListener{Listener: inner}
		ln.fails.Store(3)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() {
			_ = srv.Close()
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve after Close returned %v, want http.ErrServerClosed", err)
			}
		}()
		resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + inner.Addr().String() + "/after")
		select {
		case err := <-served:
			served <- err
			t.Fatalf("Serve returned %v after a temporary accept error", err)
		default:
		}
		if err != nil {
			t.Fatalf("a request after the accept errors: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a request after the accept errors: status %d", resp.StatusCode)
		}
	})
}
