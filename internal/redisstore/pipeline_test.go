package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// pipelineHook counts the script commands go-redis sends in pipelines and
// can hold the first such pipeline until released.
type pipelineHook struct {
	mu        sync.Mutex
	pipelines int
	cmds      int
	hold      chan struct{} // nil: hold nothing
	held      chan struct{} // closed when the first pipeline is held
}

func (h *pipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// EVALSHA only: a call Redis answered NOSCRIPT is sent again with
		// EVAL (in a pipeline of its own), which is not a second run.
		evals := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				evals++
			}
		}
		if evals == 0 {
			return next(ctx, cmds) // a new connection's handshake
		}
		h.mu.Lock()
		h.pipelines++
		h.cmds += evals
		first := h.pipelines == 1
		h.mu.Unlock()
		if first && h.hold != nil {
			close(h.held)
			<-h.hold
		}
		return next(ctx, cmds)
	}
}

// hookedEnv is env with a client of its own carrying hook, and a pipelined
// Store on it.
func hookedEnv(t *testing.T, e *env, hook *pipelineHook, p Pipelining) *Store {
	t.Helper()
	rdb := e.sameClient(t)
	rdb.AddHook(hook)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// On a cluster the pipelines go to each master's node client.
		cc.OnNewNode(func(c *redis.Client) { c.AddHook(hook) })
	}
	s := NewPipelined(rdb, p)
	t.Cleanup(s.Close) // before the client closes (LIFO)
	return s
}

func TestPipelinedCallsAreEachSentOnceAndGetTheirOwnAnswer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const n, limit = 120, 1000
		hook := &pipelineHook{}
		var observed atomic.Int64
		s := hookedEnv(t, e, hook, Pipelining{MaxCalls: 16, InFlight: 2, Timeout: testPipelineTimeout, OnPipeline: func(calls int) {
			if calls < 1 || calls > 16 {
				t.Errorf("OnPipeline(%d): want 1..16", calls)
			}
			observed.Add(int64(calls))
		}})
		per := e.current(t)
		e.seed(t, per, limit, quota.PeriodTotals{})
		// Session i asks for i+1: each answer must be its own call's.
		results := make([]quota.ApplyResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i], errs[i] = s.Apply(ctxT(t), e.cmd(fmt.Sprintf("s%d", i), int64(i+1), 0, per))
			})
		}
		wg.Wait()
		var granted int64
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("apply s%d: %v", i, errs[i])
			}
			switch r.Outcome {
			case quota.ApplyGranted:
				if r.Granted != int64(i+1) {
					t.Fatalf("s%d granted %d, asked for %d: another call's answer", i, r.Granted, i+1)
				}
				granted += r.Granted
			case quota.ApplyExhausted:
			default:
				t.Fatalf("s%d: outcome %d", i, r.Outcome)
			}
		}
		if granted > limit {
			t.Fatalf("granted %d, over the limit %d", granted, limit)
		}
		wantBalance(t, e.balance(t, per), limit, 0, granted)
		hook.mu.Lock()
		defer hook.mu.Unlock()
		if hook.cmds != n {
			t.Fatalf("%d commands sent in pipelines, want %d (each call once)", hook.cmds, n)
		}
		if observed.Load() != n {
			t.Fatalf("OnPipeline saw %d calls, want %d", observed.Load(), n)
		}
		if hook.pipelines < (n+15)/16 {
			t.Fatalf("%d pipelines for %d calls of at most 16", hook.pipelines, n)
		}
	})
}

func TestPipelinedCallCancelledBeforeItIsSentDoesNotRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		hook := &pipelineHook{hold: make(chan struct{}), held: make(chan struct{})}
		s := hookedEnv(t, e, hook, Pipelining{MaxCalls: 16, InFlight: 1})
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		first := make(chan error, 1)
		go func() { _, err := s.Apply(ctxT(t), e.cmd("held", 10, 0, per)); first <- err }()
		<-hook.held // the one slot is busy
		ctx, cancel := context.WithCancel(context.Background())
		second := make(chan error, 1)
		go func() { _, err := s.Apply(ctx, e.cmd("cancelled", 10, 0, per)); second <- err }()
		cancel()
		close(hook.hold)
		if err := <-first; err != nil {
			t.Fatalf("held apply: %v", err)
		}
		if err := <-second; !errors.Is(err, context.Canceled) || !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("cancelled apply: err = %v, want context.Canceled as ErrUnavailable", err)
		}
		if _, err := e.s.Heartbeat(ctxT(t), e.res, "cancelled", "", time.Minute); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("heartbeat of the cancelled session: %v, want ErrSessionNotFound (it never ran)", err)
		}
		wantBalance(t, e.balance(t, per), 100, 0, 10)
	})
}

// A caller does not wait for a pipeline stuck on the wire past its own
// context or the pipelining Timeout: the hook holds the pipeline until the
// calls have returned, so waiting for it would never end.
func TestPipelinedCallReturnsWhenItsContextEndsOrItTimesOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		hook := &pipelineHook{hold: make(chan struct{}), held: make(chan struct{})}
		s := hookedEnv(t, e, hook, Pipelining{MaxCalls: 16, InFlight: 1, Timeout: 50 * time.Millisecond})
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		ctx, cancel := context.WithCancel(context.Background())
		cancelled := make(chan error, 1)
		go func() { _, err := s.Apply(ctx, e.cmd("stuck", 10, 0, per)); cancelled <- err }()
		<-hook.held
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) || !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("cancelled while sent: err = %v, want context.Canceled as ErrUnavailable", err)
		}
		// The slot is still held: this call waits for it, then times out
		// without being sent.
		if _, err := s.Apply(ctxT(t), e.cmd("queued", 10, 0, per)); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("timed out in the queue: err = %v, want context.DeadlineExceeded as ErrUnavailable", err)
		}
		close(hook.hold)
		if _, err := e.s.Heartbeat(ctxT(t), e.res, "queued", "", time.Minute); !errors.Is(err, quota.ErrSessionNotFound) {
			t.Fatalf("heartbeat of the queued session: %v, want ErrSessionNotFound (never sent)", err)
		}
	})
}

func TestAPipelineOnABrokenConnectionFailsEveryCallAsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A server that accepts and hangs up at once.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	defer ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: 1, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	s := NewPipelined(rdb, Pipelining{MaxCalls: 4, InFlight: 1})
	defer s.Close()
	per := quota.Period{}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			_, err := s.Apply(ctxT(t), quota.ApplyCmd{ResourceName: "r", SessionID: fmt.Sprint(i), Amount: 1, Period: per})
			if !errors.Is(err, quota.ErrUnavailable) {
				t.Errorf("apply %d: err = %v, want ErrUnavailable", i, err)
			}
		})
	}
	wg.Wait()
}
