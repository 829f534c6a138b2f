package httpserve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// The engines (Options.Engine, config QC_HTTP_ENGINE / --http-engine).
const (
	EngineFast    = "fasthttp"
	EngineNetHTTP = "net/http"
)

// HeaderLimit is the largest request line and header section EngineFast
// reads, in bytes (fasthttp's per-connection read buffer, held while the
// connection is open: 16 MiB per 1,000 connections); a larger one gets 431.
// EngineNetHTTP's limit is net/http's MaxHeaderBytes, 64 KiB.
const HeaderLimit = 16 << 10

// Options configure a Server. The timeouts have net/http's meaning; under
// EngineFast, ReadTimeout (or ReadHeaderTimeout when ReadTimeout is 0)
// bounds the reading of the whole request.
type Options struct {
	Engine            string // EngineFast or EngineNetHTTP; "" = EngineFast
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxBodyBytes is the largest request body EngineFast reads (bytes); a
	// larger one gets 413 before the handler runs. The handler keeps its own
	// limit (internal/httpapi's limitBody) for EngineNetHTTP.
	MaxBodyBytes int64
	// ErrorBody is the JSON body of an answer the engine gives itself
	// (status 400, 408, 413, 431 or 500) with message; nil = a plain
	// {"message": …} object.
	ErrorBody func(status int, message string) []byte
	Logger    *zap.Logger // nil = zap.NewNop()
}

// Server is an engine serving one http.Handler: *http.Server's methods of
// the same names, and their meaning.
type Server interface {
	// Serve accepts connections on ln until Shutdown or Close, then returns
	// http.ErrServerClosed; any other error is the listener's.
	Serve(ln net.Listener) error
	// Shutdown stops accepting, lets the requests in progress finish and
	// closes idle connections, or returns ctx's error when it ends first.
	Shutdown(ctx context.Context) error
	// Close stops at once: listeners closed and, under EngineFast, every
	// request context ended (a connection still busy ends after its answer,
	// which says Connection: close).
	Close() error
}

// New returns the engine o.Engine names, serving h. Errors: an unknown
// engine.
func New(h http.Handler, o Options) (Server, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	switch o.Engine {
	case EngineFast, "":
		return newFast(h, o), nil
	case EngineNetHTTP:
		return &http.Server{
			Handler:           h,
			ReadHeaderTimeout: o.ReadHeaderTimeout,
			ReadTimeout:       o.ReadTimeout,
			WriteTimeout:      o.WriteTimeout,
			IdleTimeout:       o.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          zap.NewStdLog(o.Logger),
		}, nil
	}
	return nil, fmt.Errorf("unknown HTTP engine %q (want %q or %q)", o.Engine, EngineFast, EngineNetHTTP)
}
