package httpserve_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/httpserve"
)

// TestARequestContextEndsWithItsHandler: the context a handler got is done
// once its answer is written, under both engines (net/http cancels it right
// after; a goroutine the handler left with it stops).
func TestARequestContextEndsWithItsHandler(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		got := make(chan context.Context, 1)
		s := start(t, engine, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Context().Err() != nil {
				t.Errorf("the context is done while the handler runs: %v", r.Context().Err())
			}
			got <- r.Context()
		}), httpserve.Options{})
		if resp, _ := raw(t, s.addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		select {
		case <-(<-got).Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the request's context was not done after its answer")
		}
	})
}

// TestShutdownLetsARequestInProgressFinish: Shutdown stops accepting, waits
// for the request in progress, which is answered, and Serve returns
// http.ErrServerClosed; a new connection is refused.
func TestShutdownLetsARequestInProgressFinish(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		entered, release := make(chan struct{}), make(chan struct{})
		s := start(t, engine, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			_, _ = io.WriteString(w, "done")
		}), httpserve.Options{})
		answered := make(chan string, 1)
		go func() {
			resp, err := http.Get("http://" + s.addr + "/slow")
			if err != nil {
				answered <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			answered <- string(b)
		}()
		<-entered
		shut := make(chan error, 1)
		go func() { shut <- s.srv.Shutdown(shutdownCtx(t)) }()
		select {
		case err := <-s.served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
			}
			s.served <- err // for the cleanup's check
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after Shutdown")
		}
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) with a request in progress", err)
		default:
		}
		close(release)
		if a := <-answered; a != "done" {
			t.Fatalf("the request in progress got %q, want its answer", a)
		}
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			_ = c.Close()
			t.Fatal("a connection was accepted after Shutdown")
		}
	})
}

// TestCloseEndsTheRequestsContexts: under EngineFast, Close ends the
// context of every request in progress (a handler waiting on it returns)
// and Serve returns http.ErrServerClosed; Serve after Close returns it at
// once.
func TestCloseEndsTheRequestsContexts(t *testing.T) {
	entered, left := make(chan struct{}), make(chan error, 1)
	s := start(t, httpserve.EngineFast, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		left <- r.Context().Err()
	}), httpserve.Options{})
	go func() {
		if resp, err := http.Get("http://" + s.addr + "/wait"); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-entered
	if err := s.srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the handler's context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end at Close")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
}

// TestNoRequestIsServedAfterClose: when Shutdown's budget ran out and Close
// followed (internal/app's shutdownHTTP), a connection whose request was
// still in progress serves no further request, under both engines: net/http
// closes it at once; EngineFast answers the request in progress (its
// context ended) with Connection: close and ends it, instead of serving
// what the client sends next with the backends closing behind it.
func TestNoRequestIsServedAfterClose(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		entered := make(chan struct{}, 1)
		s := start(t, engine, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				entered <- struct{}{}
				<-r.Context().Done()
			}
			_, _ = io.WriteString(w, r.URL.Path)
		}), httpserve.Options{})
		c := dial(t, s.addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := s.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown with a request in progress: %v, want context.DeadlineExceeded", err)
		}
		if err := s.srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return // net/http: the connection was closed
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if !resp.Close {
			t.Errorf("the answer in progress at Close has no Connection: close")
		}
		_, _ = io.WriteString(c, "GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp, err := http.ReadResponse(br, nil); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			t.Fatalf("a request sent after Close was served: %d %q", resp.StatusCode, b)
		}
	})
}
