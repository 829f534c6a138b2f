package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/oklog/run"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/gateway"
	"github.com/quotacenter/quota-center/internal/httpserve"
)

// loop is a background job of the process: it runs until ctx ends and
// returns nil then. A failed pass is the loop's own business (each loop
// logs it, counts it and tries again at its next tick); a loop that returns
// before it was asked to, with an error or not, or that panics, has died.
type loop struct {
	name string
	run  func(ctx context.Context) error
}

// instance is a built quota-center: its listeners, its HTTP servers, its
// background loops and what to close after them. build makes one, run runs
// it under one supervisor (an oklog/run group) until ctx ends or one of its
// actors stops.
type instance struct {
	log   *zap.Logger
	grace time.Duration // http.Server.Shutdown's budget for in-flight requests
	drain time.Duration // how long /readyz answers 503 before Shutdown
	// notReady makes /readyz answer 503 (httpapi.Server.Drain).
	notReady func()

	srv httpserve.Server
	ln  net.Listener
	// pprof and pln are the optional profiling server (nil: none).
	pprof *http.Server
	pln   net.Listener
	// grpc and gln are the optional Envoy rate limit service (nil: none).
	grpc *gateway.Server
	gln  net.Listener

	loops []loop
	// closers run in order once every actor has returned, and when build
	// fails part way: the Redis pipelines, then Redis, then MySQL.
	closers []func()
}

// close runs the closers in order, once.
func (in *instance) close() {
	for _, c := range in.closers {
		c()
	}
	in.closers = nil
}

// run serves until ctx ends or an actor stops, then shuts down in this
// order: /readyz answers 503 (for the drain period), the HTTP server shuts
// down (in-flight requests get the grace period), the pprof server closes,
// the gRPC server (QC_GRPC_ADDR) stops once its calls in flight are answered,
// the background loops are cancelled and waited for, and the closers run
// (pipelines, Redis, MySQL). It returns nil after a stop asked for by ctx;
// the error of the first actor that stopped by itself otherwise: the HTTP
// server failing, or a background loop that died (logged at error level
// here; cmd/quota-center exits 1 with it). No loop is restarted: every loop
// already survives a failed pass, so one that returns is a bug or a
// failure the process should not hide.
func (in *instance) run(ctx context.Context) error {
	defer in.close()
	var g run.Group

	stop := make(chan struct{})
	g.Add(func() error {
		select {
		case <-ctx.Done():
			in.log.Info("shutting down", zap.Duration("grace", in.grace))
		case <-stop:
		}
		return nil
	}, func(error) { close(stop) })

	served := make(chan struct{}) // closed when Serve has returned
	g.Add(func() error {
		defer close(served)
		if err := in.srv.Serve(in.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	}, func(error) { in.shutdownHTTP(served) })

	if in.pprof != nil {
		g.Add(func() error {
			if err := in.pprof.Serve(in.pln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("pprof server: %w", err)
			}
			return nil
		}, func(error) { _ = in.pprof.Close() })
	}

	if in.grpc != nil {
		g.Add(func() error {
			if err := in.grpc.Serve(in.gln); err != nil {
				return fmt.Errorf("grpc server: %w", err)
			}
			return nil
		}, func(error) { in.grpc.Stop() })
	}

	loopCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	for _, l := range in.loops {
		g.Add(func() error { return in.runLoop(loopCtx, l) }, func(error) { stopLoops() })
	}

	err := g.Run()
	if err != nil {
		in.log.Error("stopped", zap.Error(err))
	} else {
		in.log.Info("stopped")
	}
	return err
}

// shutdownHTTP drains and shuts the HTTP server down; when Serve has
// already failed there is nothing to drain.
func (in *instance) shutdownHTTP(served <-chan struct{}) {
	select {
	case <-served:
		_ = in.srv.Close()
		return
	default:
	}
	in.notReady()
	if in.drain > 0 {
		in.log.Info("draining: /readyz answers 503", zap.Duration("drain", in.drain))
		time.Sleep(in.drain) // the drain period itself, not a wait for a result
	}
	sctx, cancel := context.WithTimeout(context.Background(), in.grace)
	defer cancel()
	if err := in.srv.Shutdown(sctx); err != nil {
		in.log.Warn("shutdown incomplete", zap.Error(err))
		_ = in.srv.Close()
	}
}

// runLoop runs l until ctx ends. A panic or a return before ctx ended is
// the loop's death: logged here at error level and returned, naming the
// loop, so that the supervisor stops the process with it.
func (in *instance) runLoop(ctx context.Context, l loop) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("loop %s panicked: %v", l.name, p)
			in.log.Error("background loop died", zap.String("loop", l.name), zap.Error(err),
				zap.ByteString("stack", debug.Stack()))
		}
	}()
	err = l.run(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil // stopped on purpose
	}
	if err == nil {
		err = errors.New("returned before it was stopped")
	}
	err = fmt.Errorf("loop %s: %w", l.name, err)
	in.log.Error("background loop died", zap.String("loop", l.name), zap.Error(err))
	return err
}
