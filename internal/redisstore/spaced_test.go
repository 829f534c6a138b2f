package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// With an Interval far longer than the call's bound: the first call (after
// a quiet interval) is sent at once; one that must wait for the interval
// returns within 2 × Timeout + 1s, or when its context ends, and is never
// sent, also not when Close sends the waiting pipeline.
func TestSpacedPipelineCallWaitingForTheIntervalKeepsItsBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const timeout = 50 * time.Millisecond
		hook := &pipelineHook{}
		s := hookedEnv(t, e, hook, Pipelining{MaxCalls: 16, InFlight: 1, Interval: time.Hour, Timeout: timeout})
		per := e.current(t)
		e.seed(t, per, 100, quota.PeriodTotals{})
		if _, err := s.Apply(ctxT(t), e.cmd("first", 10, 0, per)); err != nil {
			t.Fatalf("first apply, after a quiet interval: %v", err)
		}
		start := time.Now()
		if _, err := s.Apply(ctxT(t), e.cmd("bounded", 10, 0, per)); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("apply waiting for the interval: err = %v, want context.DeadlineExceeded as ErrUnavailable", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("apply waiting for the interval returned after %v, bound 2 × %v + 1s", took, timeout)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancelled := make(chan error, 1)
		go func() { _, err := s.Apply(ctx, e.cmd("cancelled", 10, 0, per)); cancelled <- err }()
		cancel()
		select {
		case err := <-cancelled:
			if !errors.Is(err, context.Canceled) || !errors.Is(err, quota.ErrUnavailable) {
				t.Fatalf("cancelled apply: err = %v, want context.Canceled as ErrUnavailable", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("cancelled apply did not return within 10 s")
		}
		s.Close() // sends the waiting pipeline: its callers gave up, so nothing
		for _, id := range []string{"bounded", "cancelled"} {
			if _, err := e.s.Heartbeat(ctxT(t), e.res, id, "", time.Minute); !errors.Is(err, quota.ErrSessionNotFound) {
				t.Fatalf("heartbeat of %s: %v, want ErrSessionNotFound (never sent)", id, err)
			}
		}
		wantBalance(t, e.balance(t, per), 100, 0, 10)
		hook.mu.Lock()
		defer hook.mu.Unlock()
		if hook.pipelines != 1 {
			t.Fatalf("%d pipelines sent, want 1 (the first call's)", hook.pipelines)
		}
	})
}
