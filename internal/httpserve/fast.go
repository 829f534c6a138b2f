package httpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// workerIdle is how long a fasthttp worker goroutine without a connection
// lives (a worker serves one connection, all its requests, so this is not
// on the path of a request).
const workerIdle = 25 * time.Millisecond

// fastServer is EngineFast: fasthttp's server calling h through the bridge.
type fastServer struct {
	srv       *fasthttp.Server
	h         http.Handler
	errorBody func(status int, message string) []byte
	log       *zap.Logger
	maxBody   int64

	base   context.Context // every request's context derives from it; ended by Close
	cancel context.CancelFunc
	mu     sync.Mutex // guards lns, and orders Serve's check of stopping with stop
	// lns are the listeners Serve was given, closed by Shutdown and Close
	// themselves: fasthttp's Shutdown does nothing while a Serve has not yet
	// registered its listener, and that Serve would then run on.
	lns []*listener
	// stopping is set by Shutdown and Close: a Serve after it returns at
	// once, and every answer after it closes its connection. fasthttp's own mark (CloseOnShutdown) is undone when
	// Shutdown's context ends first, and Close leaves busy connections open,
	// so without this they would go on serving requests after Close.
	stopping atomic.Bool
}

func newFast(h http.Handler, o Options) *fastServer {
	f := &fastServer{h: h, errorBody: o.ErrorBody, log: o.Logger, maxBody: o.MaxBodyBytes}
	if f.errorBody == nil {
		f.errorBody = plainErrorBody
	}
	f.base, f.cancel = context.WithCancel(context.Background())
	read := o.ReadTimeout
	if read <= 0 {
		read = o.ReadHeaderTimeout
	}
	maxBody := int(o.MaxBodyBytes)
	if o.MaxBodyBytes <= 0 || int64(maxBody) != o.MaxBodyBytes {
		maxBody = fasthttp.DefaultMaxRequestBodySize
		f.maxBody = int64(maxBody)
	}
	f.srv = &fasthttp.Server{
		Handler:                      f.serve,
		ErrorHandler:                 f.refuse,
		ExpectHandler:                f.expect,
		ReadTimeout:                  read,
		WriteTimeout:                 o.WriteTimeout,
		IdleTimeout:                  o.IdleTimeout,
		ReadBufferSize:               HeaderLimit,
		MaxRequestBodySize:           maxBody,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true, // an answer without a body carries no Content-Type, as under net/http
		CloseOnShutdown:              true,
		// A worker goroutine left without a connection for workerIdle ends;
		// the pool's cleaner sleeps this long between passes.
		MaxIdleWorkerDuration: workerIdle,
		Logger:                fastLogger{o.Logger},
	}
	return f
}

// Serve implements Server.
func (f *fastServer) Serve(ln net.Listener) error {
	l := &listener{Listener: ln, log: f.log}
	f.mu.Lock()
	closed := f.stopping.Load()
	if !closed {
		f.lns = append(f.lns, l)
	}
	f.mu.Unlock()
	if closed {
		_ = ln.Close()
		return http.ErrServerClosed
	}
	err := f.srv.Serve(l)
	// fasthttp's worker-pool cleaner ends at its next pass after Serve
	// returned: wait for it, so that no goroutine of this Serve outlives it.
	time.Sleep(2 * workerIdle)
	if err == nil || f.stopping.Load() {
		// fasthttp's Serve returns nil once Shutdown closed its listener.
		return http.ErrServerClosed
	}
	return err
}

// Shutdown implements Server.
func (f *fastServer) Shutdown(ctx context.Context) error {
	f.stop()
	return f.srv.ShutdownWithContext(ctx)
}

// Close implements Server.
func (f *fastServer) Close() error {
	f.stop()
	f.cancel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // closes the listeners and idle connections, waits for nothing
	if err := f.srv.ShutdownWithContext(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// stop marks f closed and closes the listeners Serve was given.
func (f *fastServer) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopping.Store(true)
	for _, l := range f.lns {
		_ = l.Close()
	}
	f.lns = nil
}

// serve is fasthttp's handler: one request through h, on fasthttp's worker
// goroutine. A panic that h lets out (internal/httpapi recovers its own
// routes' panics; this catches the rest) is logged and answered 500 with
// the connection closed; http.ErrAbortHandler the same without a log line
// (net/http logs none either, but closes without an answer).
func (f *fastServer) serve(ctx *fasthttp.RequestCtx) {
	if p := string(ctx.Request.Header.Protocol()); p != "HTTP/1.1" && p != "HTTP/1.0" {
		// fasthttp reads any other version as HTTP/1.1; net/http answers 505.
		f.answer(ctx, http.StatusHTTPVersionNotSupported, "HTTP version not supported: "+strconv.Quote(p)+" (HTTP/1.0 or HTTP/1.1)")
		ctx.SetConnectionClose()
		return
	}
	r, err := newRequest(ctx)
	if err != nil {
		f.answer(ctx, http.StatusBadRequest, fmt.Sprintf("malformed request target: %v", err))
		return
	}
	rctx, cancel := context.WithCancel(f.base)
	defer cancel()
	r = r.WithContext(rctx)
	w := &responseWriter{ctx: ctx, header: make(http.Header, 4), head: r.Method == http.MethodHead}
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler { //nolint:errorlint // net/http compares the value itself
				f.log.Error("handler panicked", zap.String("method", r.Method), zap.String("path", r.URL.Path),
					zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			}
			ctx.Response.Reset()
			f.answer(ctx, http.StatusInternalServerError, "internal error")
			lingerOnClose(ctx.Conn())
		}
	}()
	f.h.ServeHTTP(w, r)
	w.finish()
	if f.stopping.Load() {
		ctx.SetConnectionClose()
	}
}

// refuse is fasthttp's ErrorHandler: a request it could not read. The
// connection is closed after the answer (fasthttp does so), lingering so
// that a client still sending reads the answer (linger.go).
func (f *fastServer) refuse(ctx *fasthttp.RequestCtx, err error) {
	lingerOnClose(ctx.Conn())
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		f.answer(ctx, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request header too large: limit is %d bytes", HeaderLimit))
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		f.answer(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: limit is %d bytes", f.maxBody))
	case errors.As(err, &ne) && ne.Timeout():
		f.answer(ctx, http.StatusRequestTimeout, "request not read in time")
	default:
		// fasthttp's error quotes the request, headers included: the log
		// (debug) has it, the answer does not.
		f.log.Debug("malformed HTTP request", zap.Error(err))
		f.answer(ctx, http.StatusBadRequest, "malformed HTTP request: the request line or a header could not be read")
	}
}

// expect is fasthttp's ExpectHandler, for a request waiting for 100
// Continue: a body declared over the limit is refused at once (413, the
// connection closed), as net/http's handler refuses it without asking for
// the body; anything else gets 100 Continue.
func (f *fastServer) expect(ctx *fasthttp.RequestCtx) int {
	if n := ctx.Request.Header.ContentLength(); n > 0 && int64(n) > f.maxBody {
		lingerOnClose(ctx.Conn())
		f.answer(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: limit is %d bytes", f.maxBody))
		return http.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusContinue
}

// answer writes the engine's own answer: status and errorBody's JSON.
func (f *fastServer) answer(ctx *fasthttp.RequestCtx, status int, message string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(f.errorBody(status, message))
	if status >= 500 || status == http.StatusRequestHeaderFieldsTooLarge || status == http.StatusRequestEntityTooLarge {
		ctx.SetConnectionClose()
	}
}

func plainErrorBody(_ int, message string) []byte {
	b, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{message})
	return b
}

// fastLogger is fasthttp's Logger (accept and connection errors) as zap at
// debug level: a client's broken connection is not the service's error.
type fastLogger struct{ log *zap.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}
