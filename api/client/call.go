package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrBreakerOpen matches (errors.Is) a call the Manager's circuit breaker
// refused without sending it: the center failed DefaultBreakerFailures
// times in a row and the breaker is open (or half-open with its one probe
// already out).
var ErrBreakerOpen = errors.New("quota-center client: circuit breaker open")

// ErrUnavailable matches (errors.Is) every *UnavailableError.
var ErrUnavailable = errors.New("quota-center client: center unavailable")

// UnavailableError says the center could not answer a call: every try
// failed on the network, timed out or was answered 5xx/408, or the breaker
// refused it (then errors.Is(err, ErrBreakerOpen)). Acquire returns it on a
// resource whose fallback is FailClosed.
type UnavailableError struct {
	Op       string // "apply", "heartbeat", "finish" or "status"
	Resource string
	Tries    int   // calls actually sent (0 when the breaker refused the first)
	Err      error // the last failure
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("quota-center client: %s %s: center unavailable after %d tries: %v", e.Op, e.Resource, e.Tries, e.Err)
}

// Unwrap returns the last failure.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// isCenterFailure says whether err means the center did not work (it counts
// against the breaker and may be retried): a transport error, a timeout, or
// a 5xx or 408 answer. A 4xx decision (429, 404, 409, 400 …) is an answer,
// not a failure; so is the caller's own cancelled context.
func isCenterFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode >= 500 || e.StatusCode == http.StatusRequestTimeout
	}
	return true
}

// retryAfter returns the Retry-After the server sent with err, or 0.
func retryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// backoff is the wait before try number try+1 (try ≥ 0): full jitter, a
// uniform random time in [0, min(max, base·2^try)).
func backoff(base, max time.Duration, try int) time.Duration {
	ceil := base
	for i := 0; i < try && ceil < max; i++ {
		ceil *= 2
	}
	if ceil > max {
		ceil = max
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// call runs fn through the breaker, retrying center failures with backoff
// as WithRetry says, within ctx. A refusal by the breaker or a last failure
// becomes an *UnavailableError; the caller's cancelled context comes back
// as ctx.Err(); a server decision (4xx) comes back as its *Error.
func (m *Manager) call(ctx context.Context, op string, fn func(context.Context) error) error {
	return m.callResource(ctx, op, "", fn)
}

func (m *Manager) callResource(ctx context.Context, op, resource string, fn func(context.Context) error) error {
	var last error
	tries := 0
	for try := 0; try < m.cfg.retryAttempts; try++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		once := func() (struct{}, error) {
			tries++
			err := fn(ctx)
			if err != nil && ctx.Err() != nil {
				err = context.Canceled // the caller gave up: not the center's failure
			}
			return struct{}{}, err
		}
		var err error
		if isProbe(ctx) { // a report sent past the open breaker (pending.flush)
			_, err = once()
		} else {
			_, err = m.breaker.Load().Execute(once)
		}
		m.met.calls.WithLabelValues(op, callResult(err)).Inc()
		if err == nil {
			return nil
		}
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			return &UnavailableError{Op: op, Resource: resource, Tries: tries, Err: fmt.Errorf("%w (%w)", ErrBreakerOpen, err)}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !isCenterFailure(err) {
			return err
		}
		last = err
		if try+1 == m.cfg.retryAttempts {
			break
		}
		wait := backoff(m.cfg.retryBase, m.cfg.retryMax, try)
		if ra := retryAfter(err); ra > wait {
			wait = ra
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			break // the answer would come too late for the caller anyway
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return &UnavailableError{Op: op, Resource: resource, Tries: tries, Err: last}
}

// callResult is the result label of quota_client_calls_total.
func callResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return "breaker_open"
	case isCenterFailure(err):
		return "failure"
	default:
		return "refused"
	}
}
