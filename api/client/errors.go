package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error codes the server returns in the "code" field of an error body.
const (
	CodeInvalidArgument      = "INVALID_ARGUMENT"       // 400
	CodeUnauthenticated      = "UNAUTHENTICATED"        // 401
	CodePermissionDenied     = "PERMISSION_DENIED"      // 403
	CodeResourceNotFound     = "RESOURCE_NOT_FOUND"     // 404: no policy for the resource
	CodeSessionNotFound      = "SESSION_NOT_FOUND"      // 404
	CodeNotFound             = "NOT_FOUND"              // 404: unknown route
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"     // 405
	CodeSessionNotActive     = "SESSION_NOT_ACTIVE"     // 409: session FINISHED or LEAKED
	CodeSessionConflict      = "SESSION_CONFLICT"       // 409: session id reused with other arguments
	CodeConflict             = "CONFLICT"               // 409: pools admin: a line with open sessions, a reclaim in another state, too little buffer
	CodeReconcileSkipped     = "RECONCILE_SKIPPED"      // 409: a reconciliation pass was skipped (lock held); retry
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"      // 413: body over 1 MiB
	CodeRequestTimeout       = "REQUEST_TIMEOUT"        // 408: body slower than the server's read timeout
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE" // 415
	CodeQuotaExhausted       = "QUOTA_EXHAUSTED"        // 429
	CodeBackendUnavailable   = "BACKEND_UNAVAILABLE"    // 503
	CodeCircuitOpen          = "CIRCUIT_BREAKER_OPEN"   // 503
	CodeInternal             = "INTERNAL_ERROR"         // 500
)

// Error is a non-2xx answer of the server. errors.Is(err, ErrX) compares
// Code with the sentinel's code, so match with the sentinels below and read
// the details with errors.As.
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the server's error code (one of the Code constants), or ""
	// when the body was not a quota-center error (for example an HTML page
	// from a proxy).
	Code string
	// Message is the server's message, or a prefix of the raw body, or the
	// status text when the body was empty.
	Message string
	// RetryAfter is the Retry-After header: for QUOTA_EXHAUSTED the time to
	// the next reset, for CIRCUIT_BREAKER_OPEN when to try again. 0 when the
	// header was absent (for QUOTA_EXHAUSTED: the policy never resets).
	RetryAfter time.Duration
	// SessionStatus is the session's status ("FINISHED" or "LEAKED") for
	// SESSION_NOT_ACTIVE, else "".
	SessionStatus string
	// RemainingQuota is what remains in the period, sent with
	// QUOTA_EXHAUSTED; nil when the server did not send it.
	RemainingQuota *int64
	// LineRemaining is what the business line's next apply of the same
	// kind could be granted now (0 when its watermark would refuse it),
	// sent with QUOTA_EXHAUSTED of an apply on a line; nil otherwise.
	LineRemaining *int64
	// NextResetAt is when the period resets, sent with QUOTA_EXHAUSTED
	// when the policy resets; zero otherwise.
	NextResetAt time.Time
	// Reason is why an apply that named a business line was refused, sent
	// with its QUOTA_EXHAUSTED: ReasonLineExhausted, ReasonWatermark,
	// ReasonPoolExhausted or ReasonExhausted (the resource itself is used
	// up); "" for a resource without lines (older servers also left it out
	// when a line's resource was used up).
	Reason string
}

// Refusal reasons of a QUOTA_EXHAUSTED on a business line (Error.Reason).
const (
	// ReasonLineExhausted: the line used all it may (its part, its
	// borrowing limit, buffer lent, grants).
	ReasonLineExhausted = "LINE_EXHAUSTED"
	// ReasonWatermark: the line is above its tier's reject watermark; retry
	// later, or send critical work.
	ReasonWatermark = "WATERMARK"
	// ReasonPoolExhausted: the shared pool is used up; the line may not
	// borrow more now.
	ReasonPoolExhausted = "POOL_EXHAUSTED"
	// ReasonExhausted: the resource itself is used up (its limit less what
	// every line holds, plus grants), whatever the line's pools; nothing
	// passes until the reset or a grant.
	ReasonExhausted = "EXHAUSTED"
)

// Error returns "quota-center: <status> <code>: <message>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("quota-center: ")
	if e.StatusCode != 0 {
		b.WriteString(strconv.Itoa(e.StatusCode))
		b.WriteByte(' ')
	}
	if e.Code != "" {
		b.WriteString(e.Code)
	} else {
		b.WriteString("HTTP error")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.SessionStatus != "" {
		fmt.Fprintf(&b, " (session %s)", e.SessionStatus)
	}
	return b.String()
}

// Is reports whether target is a *Error with the same non-empty Code, so
// that errors.Is(err, ErrQuotaExhausted) works whatever the status and
// message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code != "" && t.Code == e.Code
}

// Sentinel errors, one per server error code, for errors.Is.
var (
	// ErrInvalidArgument: a field is missing or out of range (400).
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument, Message: "invalid argument"}
	// ErrUnauthenticated: missing or wrong API key or admin token (401).
	ErrUnauthenticated = &Error{Code: CodeUnauthenticated, Message: "unauthenticated"}
	// ErrPermissionDenied: the credentials may not call this endpoint (403).
	ErrPermissionDenied = &Error{Code: CodePermissionDenied, Message: "permission denied"}
	// ErrResourceNotFound: no policy exists for the resource (404).
	ErrResourceNotFound = &Error{Code: CodeResourceNotFound, Message: "resource not found"}
	// ErrSessionNotFound: no such session for that resource (404).
	ErrSessionNotFound = &Error{Code: CodeSessionNotFound, Message: "session not found"}
	// ErrNotFound: the route does not exist, typically a wrong base URL (404).
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
	// ErrMethodNotAllowed: wrong HTTP method for the route (405).
	ErrMethodNotAllowed = &Error{Code: CodeMethodNotAllowed, Message: "method not allowed"}
	// ErrSessionNotActive: the session is FINISHED or LEAKED (409); see
	// Error.SessionStatus.
	ErrSessionNotActive = &Error{Code: CodeSessionNotActive, Message: "session not active"}
	// ErrSessionConflict: the session id was reused with other arguments (409).
	ErrSessionConflict = &Error{Code: CodeSessionConflict, Message: "session conflict"}
	// ErrConflict: a pools admin call conflicts with the state (409): a
	// line with open sessions, a reclaim in another state, too little
	// free buffer.
	ErrConflict = &Error{Code: CodeConflict, Message: "conflict"}
	// ErrReconcileSkipped: a resource's reconciliation pass was skipped
	// because another pass holds its lock (409); retry after
	// Error.RetryAfter.
	ErrReconcileSkipped = &Error{Code: CodeReconcileSkipped, Message: "reconcile skipped"}
	// ErrPayloadTooLarge: the request body exceeded 1 MiB (413).
	ErrPayloadTooLarge = &Error{Code: CodePayloadTooLarge, Message: "payload too large"}
	// ErrRequestTimeout: the body arrived slower than the server's read
	// timeout (408); safe to retry.
	ErrRequestTimeout = &Error{Code: CodeRequestTimeout, Message: "request timeout"}
	// ErrUnsupportedMediaType: the body was not application/json (415).
	ErrUnsupportedMediaType = &Error{Code: CodeUnsupportedMediaType, Message: "unsupported media type"}
	// ErrQuotaExhausted: not enough quota remains (429); see
	// Error.RetryAfter and Error.RemainingQuota.
	ErrQuotaExhausted = &Error{Code: CodeQuotaExhausted, Message: "quota exhausted"}
	// ErrBackendUnavailable: a backend was unreachable and nothing was
	// changed (503); safe to retry with the same session id.
	ErrBackendUnavailable = &Error{Code: CodeBackendUnavailable, Message: "backend unavailable"}
	// ErrCircuitOpen: a circuit breaker is open (503); see Error.RetryAfter.
	ErrCircuitOpen = &Error{Code: CodeCircuitOpen, Message: "circuit breaker open"}
	// ErrInternal: an unexpected server error (500).
	ErrInternal = &Error{Code: CodeInternal, Message: "internal error"}
)

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Success        *bool  `json:"success"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	Status         string `json:"status"`
	RemainingQuota *int64 `json:"remainingQuota"`
	LineRemaining  *int64 `json:"lineRemaining"`
	NextResetAt    string `json:"nextResetAt"`
	Reason         string `json:"reason"`
}

// newError builds the *Error of a non-2xx answer from its status, headers
// and (already read) body.
func newError(status int, h http.Header, body []byte) *Error {
	e := &Error{StatusCode: status, RetryAfter: parseRetryAfter(h.Get("Retry-After"), time.Now())}
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err == nil && (eb.Code != "" || eb.Message != "" || eb.Status != "") {
		e.Code = eb.Code
		e.Message = eb.Message
		e.RemainingQuota = eb.RemainingQuota
		e.LineRemaining = eb.LineRemaining
		e.Reason = eb.Reason
		if eb.NextResetAt != "" {
			e.NextResetAt, _ = time.Parse(time.RFC3339Nano, eb.NextResetAt)
		}
		if eb.Code == CodeSessionNotActive {
			e.SessionStatus = eb.Status
		} else if eb.Code == "" && eb.Message == "" {
			// e.g. readyz: {"status":"not ready"}
			e.Message = eb.Status
		}
		return e
	}
	e.Message = snippet(body)
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// snippet returns up to 200 bytes of a non-JSON body, trimmed, valid UTF-8.
func snippet(body []byte) string {
	s := strings.TrimSpace(string(body))
	const max = 200
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
// It returns 0 when the header is absent, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64((1<<63-1)/time.Second) {
			secs = int64((1<<63 - 1) / time.Second)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
