package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

func TestCodeOfClassifiesEveryDomainError(t *testing.T) {
	busy := NewError(CodeConflict, "business line has open sessions")
	inUse := NewError(CodePolicyInUse, "policy in use")
	tests := []struct {
		name string
		give error
		want Code
	}{
		{"no error has no code", nil, ""},
		{"a validation error is an invalid argument", invalid("totalLimit", "must be positive"), CodeInvalidArgument},
		{"a wrapped validation error is still one", fmt.Errorf("put policy: %w", invalid("x", "y")), CodeInvalidArgument},
		{"no policy is resource not found", fmt.Errorf("apply gpu: %w", ErrResourceNotFound), CodeResourceNotFound},
		{"no session is session not found", ErrSessionNotFound, CodeSessionNotFound},
		{"a finished session is not active", &NotActiveError{SessionID: "s1", Status: StatusFinished}, CodeSessionNotActive},
		{"a reused idempotency key is a session conflict", ErrSessionConflict, CodeSessionConflict},
		{"known credentials that may not do this are denied", fmt.Errorf("key: %w", ErrPermissionDenied), CodePermissionDenied},
		{"a backend down is unavailable", fmt.Errorf("redis: %w", ErrUnavailable), CodeBackendUnavailable},
		{"a deadline exceeded is unavailable", fmt.Errorf("mysql: %w", context.DeadlineExceeded), CodeBackendUnavailable},
		{"a lost lock is unavailable: another instance holds it, retry", fmt.Errorf("adjust r: lock reconcile: %w", ErrLockLost), CodeBackendUnavailable},
		{"a call cut short by a lost lock is unavailable", LockLost(lostCtx(), context.Canceled), CodeBackendUnavailable},
		{"an open breaker is circuit open", &CircuitOpenError{Backend: "redis", RetryAfter: time.Second}, CodeCircuitOpen},
		{"an unknown line is not found", fmt.Errorf("line a: %w", pools.ErrUnknownLine), CodeNotFound},
		{"an unknown grant is not found", pools.ErrUnknownGrant, CodeNotFound},
		{"an unknown reclaim is not found", pools.ErrUnknownReclaim, CodeNotFound},
		{"a reclaim in another state is a conflict", pools.ErrReclaimState, CodeConflict},
		{"an error made with NewError has its code", fmt.Errorf("line a: %w", busy), CodeConflict},
		{"a joined NewError error has its code", errors.Join(inUse, errors.New("3 live sessions")), CodePolicyInUse},
		{"a NewError code wins over a validation error in the same chain", fmt.Errorf("%w: %w", inUse, invalid("x", "y")), CodePolicyInUse},
		{"a validation error wins over unavailable in the same chain", fmt.Errorf("%w: %w", invalid("x", "y"), ErrUnavailable), CodeInvalidArgument},
		{"anything else is internal", errors.New("boom"), CodeInternal},
		{"a cancelled context is internal, not unavailable", context.Canceled, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CodeOf(tt.give); got != tt.want {
				t.Fatalf("CodeOf(%v) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestNewErrorIsASentinelWithItsMessage(t *testing.T) {
	a := NewError(CodeConflict, "same words")
	b := NewError(CodeConflict, "same words")
	if a.Error() != "same words" {
		t.Fatalf("message %q", a.Error())
	}
	if !errors.Is(fmt.Errorf("x: %w", a), a) || errors.Is(a, b) {
		t.Fatal("NewError errors must compare by identity under errors.Is")
	}
}

// lostCtx is a context cancelled as KeepLock cancels it when its lock is
// found held by another token.
func lostCtx() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrLockLost)
	return ctx
}
