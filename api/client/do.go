package client

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
)

// PanicError is what Do returns when fn panicked: the session was still
// finished (see Do) and the panic is handed back as an error rather than
// re-raised, with the value and the stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("quota-center client: fn panicked: %v", e.Value)
}

// Do acquires amount of resource, runs fn with a context that ends when the
// lease does, and finishes the session with the usage fn returns. On a
// DURATION resource a negative used means "the measured elapsed seconds"
// (rounded up). fn's error is returned, and the session is finished all the
// same: with the usage fn returned, or, when that is negative on another
// unit, with the whole grant. A panic in fn finishes with the elapsed
// seconds (DURATION) or the whole grant and is returned as a *PanicError.
// Acquire's errors are returned as they are (fn does not run), including
// the fallback's (*UnavailableError, *FallbackError); on a fail-open lease
// fn runs and its usage is reported when the center is back. A failed
// finish is remembered and reported later, so it is not an error here.
func (m *Manager) Do(ctx context.Context, resource string, amount int64, fn func(ctx context.Context) (used int64, err error)) (err error) {
	l, err := m.Acquire(ctx, resource, amount)
	if err != nil {
		return err
	}
	used, ferr := runGuarded(l.Context(), fn)
	var pe *PanicError
	if used < 0 || errors.As(ferr, &pe) {
		used = l.granted
		if l.qtype == QuotaTypeDuration || (l.failOpen && m.quotaTypeCached(resource) == QuotaTypeDuration) {
			used = elapsedSeconds(m.cfg.now().Sub(l.started))
		}
	}
	_, finErr := l.Finish(ctx, used)
	if errors.Is(finErr, ErrLeaseEnded) {
		finErr = nil // the lease ended on its own (cancelled, leak guard): already reported
	}
	return errors.Join(ferr, finErr)
}

// runGuarded calls fn, turning a panic into a *PanicError.
func runGuarded(ctx context.Context, fn func(context.Context) (int64, error)) (used int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			used, err = 0, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx)
}

// quotaTypeCached returns resource's unit if it is known, without a call.
func (m *Manager) quotaTypeCached(resource string) QuotaType {
	if t, ok := m.types.Load(resource); ok {
		return t.(QuotaType)
	}
	return ""
}
