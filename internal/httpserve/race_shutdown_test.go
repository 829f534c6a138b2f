package httpserve_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/httpserve"
)

// TestShutdownRightAfterServeStartsEndsServe: a Shutdown that comes while
// Serve is starting (internal/app's run shuts the server down at once when
// the process is asked to stop as it starts, or a background loop dies
// then) still ends Serve with http.ErrServerClosed, as under net/http;
// a Serve left running would keep the process from ever stopping.
func TestShutdownRightAfterServeStartsEndsServe(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		for i := range 3000 {
			srv, err := httpserve.New(echo, httpserve.Options{Engine: engine, ReadTimeout: time.Second, WriteTimeout: time.Second,
				IdleTimeout: time.Second, MaxBodyBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.Shutdown(ctx)
			cancel()
			select {
			case err := <-served:
				if !errors.Is(err, http.ErrServerClosed) {
					t.Fatalf("try %d: Serve returned %v, want http.ErrServerClosed", i, err)
				}
			case <-time.After(2 * time.Second):
				_ = ln.Close()
				t.Fatalf("try %d: Serve still running 2 s after Shutdown returned", i)
			}
		}
	})
}
