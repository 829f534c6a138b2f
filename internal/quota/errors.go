package quota

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Sentinel errors of the domain. Adapters wrap their own failures into these
// with %w so that internal/httpapi can map every error to one status and code.
var (
	// ErrResourceNotFound: no policy exists for the resource. An unknown
	// resource never gets a default limit (HTTP 404 RESOURCE_NOT_FOUND).
	ErrResourceNotFound = errors.New("resource not found")
	// ErrSessionNotFound: no session with that id exists for that resource
	// (HTTP 404 SESSION_NOT_FOUND).
	ErrSessionNotFound = errors.New("session not found")
	// ErrSessionNotActive: the session is FINISHED or LEAKED and cannot be
	// heartbeated (HTTP 409 SESSION_NOT_ACTIVE). Use errors.As with
	// *NotActiveError to read the status.
	ErrSessionNotActive = errors.New("session not active")
	// ErrSessionConflict: a client-given session id (the idempotency key) was
	// reused with another resource, amount or actual usage (HTTP 409
	// SESSION_CONFLICT).
	ErrSessionConflict = errors.New("session conflict")
	// ErrUnavailable: a backend (Redis or MySQL) could not be reached or did
	// not answer in time; nothing was changed, or what was changed was rolled
	// back (HTTP 503 BACKEND_UNAVAILABLE).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrSlotMoving: a Redis Cluster slot was moving between masters (the
	// node answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN Hash slot not served)
	// for longer than the balance store's retries: the call did not run. It
	// matches ErrUnavailable as well, so it is answered like an outage (HTTP
	// 503 BACKEND_UNAVAILABLE, or a fail-open grant), but a circuit breaker
	// does not count it: the masters are healthy (issue 22, item 6).
	ErrSlotMoving = fmt.Errorf("%w: cluster slot moving", ErrUnavailable)
	// ErrCircuitOpen: a circuit breaker in front of a backend is open; the
	// call was not attempted (HTTP 503 CIRCUIT_BREAKER_OPEN).
	ErrCircuitOpen = errors.New("circuit breaker open")
	// ErrLockLost: a write fenced by a lock (Fence) was refused because the
	// lock is no longer the caller's: it expired and another holder took it,
	// or it is gone (issue 11 §3.4). Nothing was written; the caller stops
	// or starts over (takes the lock again). Never a backend failure.
	ErrLockLost = errors.New("lock lost to another holder")
)

// ValidationError reports one bad input field (HTTP 400 INVALID_ARGUMENT).
// Nothing is changed when it is returned.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// MaxMessageBytes bounds an error message sent to a client (HTTP "message",
// a gRPC status): some quote what the client sent — an unknown field's or
// parameter's name, a path, a descriptor's domain or value — which may be as
// long as the request itself.
const MaxMessageBytes = 1024

// ClipMessage returns msg cut to at most MaxMessageBytes at a rune boundary,
// with "… (N bytes in all)" appended when it was cut; a shorter msg is
// returned as it is.
func ClipMessage(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	cut := MaxMessageBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "… (" + strconv.Itoa(len(msg)) + " bytes in all)"
}

func invalid(field, reason string) error { return &ValidationError{Field: field, Reason: reason} }

// NotActiveError carries the status of a session that is no longer USING.
// It matches ErrSessionNotActive under errors.Is.
type NotActiveError struct {
	SessionID string
	Status    Status
}

func (e *NotActiveError) Error() string {
	return fmt.Sprintf("session %s is %s", e.SessionID, e.Status)
}

// Is makes errors.Is(err, ErrSessionNotActive) true.
func (e *NotActiveError) Is(target error) bool { return target == ErrSessionNotActive }

// ErrDuplicateSession is returned by a Ledger when a session id is already in
// the ledger. The Service turns it into a replay or ErrSessionConflict; it
// never reaches a client as such.
var ErrDuplicateSession = errors.New("duplicate session id")

// CircuitOpenError says a backend's circuit breaker is open: the call was not
// attempted. RetryAfter is how long until the breaker lets a probe through.
// It matches ErrCircuitOpen under errors.Is.
type CircuitOpenError struct {
	Backend    string
	RetryAfter time.Duration
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("%s circuit breaker open; retry in %s", e.Backend, e.RetryAfter)
}

// Is makes errors.Is(err, ErrCircuitOpen) true.
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }
