package httpserve_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/httpserve"
)

// limited answers 413 to a body over max, declared or read, as
// internal/httpapi's limitBody does (under EngineNetHTTP it is the
// handler's limit that answers; under EngineFast the engine's).
func limited(max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tooLarge := func() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = io.WriteString(w, `{"code":"PAYLOAD_TOO_LARGE"}`)
		}
		if r.ContentLength > max {
			tooLarge()
			return
		}
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max)); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge()
				return
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

// TestAClientStillSendingReadsTheRefusal: a Go client sending a body (or a
// header section) the server refuses before reading it all gets the 413
// (431), not a connection reset, under both engines: the engine lets the
// client read its answer before the connection goes (net/http's lingering
// close). api/client takes a transport error for the center failing (and
// retries); a 4xx is an answer.
func TestAClientStillSendingReadsTheRefusal(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		s := start(t, engine, limited(1024), httpserve.Options{MaxBodyBytes: 1024})
		big := bytes.Repeat([]byte("x"), 8<<20)
		for _, c := range []struct {
			name   string
			req    func() *http.Request
			status int
		}{
			{"declared body over the limit", func() *http.Request {
				r, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/p", bytes.NewReader(big))
				return r
			}, http.StatusRequestEntityTooLarge},
			{"chunked body over the limit", func() *http.Request {
				r, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/p", io.NopCloser(bytes.NewReader(big)))
				r.ContentLength = -1
				return r
			}, http.StatusRequestEntityTooLarge},
			{"header section over both engines' limits", func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/p", nil)
				r.Header.Set("X-Pad", strings.Repeat("p", 1<<20))
				return r
			}, http.StatusRequestHeaderFieldsTooLarge},
		} {
			for i := range 5 {
				// A new connection each time (no client-side retry on a reused
				// one), kept alive as api/client's are: a request saying
				// Connection: close makes net/http close without lingering.
				tr := &http.Transport{}
				resp, err := (&http.Client{Transport: tr}).Do(c.req())
				tr.CloseIdleConnections()
				if err != nil {
					t.Fatalf("%s, try %d: %v, want a %d answer", c.name, i, err, c.status)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Fatalf("%s, try %d: status %d, want %d", c.name, i, resp.StatusCode, c.status)
				}
			}
		}
		if resp, body := raw(t, s.addr, "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusOK {
			t.Fatalf("after the refusals: %d %q", resp.StatusCode, body)
		}
	})
}

// TestADeclaredBodyOverTheLimitIsRefusedBeforeContinue: a client that waits
// for 100 Continue before sending a body declared over the limit gets the
// 413 at once, not 100 Continue (which would have it send the body only to
// be refused), under both engines.
func TestADeclaredBodyOverTheLimitIsRefusedBeforeContinue(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		s := start(t, engine, limited(1024), httpserve.Options{MaxBodyBytes: 1024})
		resp, body := raw(t, s.addr, "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4096\r\n\r\n")
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "PAYLOAD_TOO_LARGE") {
			t.Fatalf("status %d %q, want 413 PAYLOAD_TOO_LARGE before any body", resp.StatusCode, body)
		}
	})
}
