package quota

import (
	"context"
	"errors"

	"github.com/quotacenter/quota-center/internal/pools"
)

// Code is the transport-neutral code of a domain error: what went wrong,
// not how a transport says it. Front ends map it to their own statuses
// (internal/httpapi to an HTTP status, a gRPC front end to a gRPC status);
// the string is the wire code of the JSON error body, so it never changes
// once shipped.
type Code string

// The codes a domain error (or a domain result that is not a success, such
// as a refusal) can carry. Errors only a transport can produce (a body too
// large, a bad media type, missing credentials, an unknown route) have
// their codes in that transport's package.
const (
	// CodeInvalidArgument: a *ValidationError; nothing was changed.
	CodeInvalidArgument Code = "INVALID_ARGUMENT"
	// CodeResourceNotFound: ErrResourceNotFound, no policy for the resource.
	CodeResourceNotFound Code = "RESOURCE_NOT_FOUND"
	// CodeSessionNotFound: ErrSessionNotFound.
	CodeSessionNotFound Code = "SESSION_NOT_FOUND"
	// CodeNotFound: a pools object (business line, grant, reclaim) that does
	// not exist (pools.ErrUnknownLine, ErrUnknownGrant, ErrUnknownReclaim).
	CodeNotFound Code = "NOT_FOUND"
	// CodeSessionNotActive: ErrSessionNotActive (a *NotActiveError).
	CodeSessionNotActive Code = "SESSION_NOT_ACTIVE"
	// CodeSessionConflict: ErrSessionConflict, an idempotency key reused
	// with other arguments.
	CodeSessionConflict Code = "SESSION_CONFLICT"
	// CodeConflict: a pools change refused by the state it meets (a line
	// with open sessions, a reclaim in another state, too little buffer,
	// pools.ErrReclaimState and the errors admin makes with NewError), and
	// an apply on a line being deleted (pools.ErrLineClosing).
	CodeConflict Code = "CONFLICT"
	// CodePolicyInUse: a policy change that would reinterpret or orphan
	// what is in use (admin.ErrInUse, made with NewError).
	CodePolicyInUse Code = "POLICY_IN_USE"
	// CodePermissionDenied: ErrPermissionDenied, known credentials that may
	// not do this.
	CodePermissionDenied Code = "PERMISSION_DENIED"
	// CodeQuotaExhausted: a refusal. It is a result (ApplyResponse.Granted
	// false), never an error, but it has its own code on the wire.
	CodeQuotaExhausted Code = "QUOTA_EXHAUSTED"
	// CodeReconcileSkipped: a reconciliation pass skipped because another
	// pass held the resource's lock; a result, not an error.
	CodeReconcileSkipped Code = "RECONCILE_SKIPPED"
	// CodeBackendUnavailable: ErrUnavailable, a deadline exceeded, or
	// ErrLockLost (another instance holds the lock the work needed: nothing
	// was written); a retry with the same idempotency key is safe.
	CodeBackendUnavailable Code = "BACKEND_UNAVAILABLE"
	// CodeCircuitOpen: ErrCircuitOpen (a *CircuitOpenError); the call was
	// not attempted.
	CodeCircuitOpen Code = "CIRCUIT_BREAKER_OPEN"
	// CodeInternal: any other error, a bug or an unforeseen failure.
	CodeInternal Code = "INTERNAL_ERROR"
)

// ErrPermissionDenied: the caller's credentials are known but may not do
// this (another resource or business line than its key's, an endpoint that
// is disabled).
var ErrPermissionDenied = errors.New("permission denied")

// codedError is an error made by NewError: its message and its code.
type codedError struct {
	code Code
	msg  string
}

func (e *codedError) Error() string { return e.msg }

// NewError returns a sentinel error with the given message that CodeOf
// classifies as code. It is for the domain's satellite packages (admin,
// poolctl) that import quota and so cannot be listed in CodeOf; compare
// with errors.Is as with any sentinel.
func NewError(code Code, message string) error { return &codedError{code: code, msg: message} }

// CodeOf is the one classification of errors: the Code of err, looked up
// through its wrapping (errors.Is / errors.As). nil has no code (""); an
// error of no known kind is CodeInternal. Where a chain holds several kinds,
// the first case below wins: pools and NewError errors, then validation,
// then the not-found, conflict and backend errors in the order listed.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var ce *codedError
	var ve *ValidationError
	switch {
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, pools.ErrUnknownLine), errors.Is(err, pools.ErrUnknownGrant), errors.Is(err, pools.ErrUnknownReclaim):
		return CodeNotFound
	case errors.Is(err, pools.ErrReclaimState), errors.Is(err, pools.ErrLineClosing):
		return CodeConflict
	case errors.As(err, &ve):
		return CodeInvalidArgument
	case errors.Is(err, ErrPermissionDenied):
		return CodePermissionDenied
	case errors.Is(err, ErrResourceNotFound):
		return CodeResourceNotFound
	case errors.Is(err, ErrSessionNotFound):
		return CodeSessionNotFound
	case errors.Is(err, ErrSessionNotActive):
		return CodeSessionNotActive
	case errors.Is(err, ErrSessionConflict):
		return CodeSessionConflict
	case errors.Is(err, ErrCircuitOpen):
		return CodeCircuitOpen
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrLockLost):
		return CodeBackendUnavailable
	}
	return CodeInternal
}
