package httpapi

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Wire codes of the error body {success:false, code, message} that only
// the HTTP transport produces; a domain error's code is its quota.Code
// (quota.CodeOf), written as is.
const (
	CodeSuccess          = "SUCCESS"
	CodeUnauthenticated  = "UNAUTHENTICATED"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	CodePayloadTooLarge  = "PAYLOAD_TOO_LARGE"
	CodeRequestTimeout   = "REQUEST_TIMEOUT"
	CodeUnsupportedMedia = "UNSUPPORTED_MEDIA_TYPE"
	// CodeNotImplemented answers the operators' endpoints on a server built
	// without an Operator (501).
	CodeNotImplemented = "NOT_IMPLEMENTED"
)

// The domain's wire codes under the names this package's callers and tests
// have always used.
const (
	CodeInvalidArgument    = string(quota.CodeInvalidArgument)
	CodePermissionDenied   = string(quota.CodePermissionDenied)
	CodeResourceNotFound   = string(quota.CodeResourceNotFound)
	CodeSessionNotFound    = string(quota.CodeSessionNotFound)
	CodeNotFound           = string(quota.CodeNotFound) // also an unknown route
	CodeSessionNotActive   = string(quota.CodeSessionNotActive)
	CodeSessionConflict    = string(quota.CodeSessionConflict)
	CodeReconcileSkipped   = string(quota.CodeReconcileSkipped)
	CodeConflict           = string(quota.CodeConflict)
	CodePolicyInUse        = string(quota.CodePolicyInUse)
	CodeQuotaExhausted     = string(quota.CodeQuotaExhausted)
	CodeBackendUnavailable = string(quota.CodeBackendUnavailable)
	CodeCircuitOpen        = string(quota.CodeCircuitOpen)
	CodeInternal           = string(quota.CodeInternal)
)

// errorBody is the JSON of every error answer.
type errorBody struct {
	Success        bool   `json:"success"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	Status         string `json:"status,omitempty"`         // SESSION_NOT_ACTIVE: the session's status
	RemainingQuota *int64 `json:"remainingQuota,omitempty"` // QUOTA_EXHAUSTED
	LineRemaining  *int64 `json:"lineRemaining,omitempty"`  // QUOTA_EXHAUSTED on a business line: what it could be granted now
	NextResetAt    string `json:"nextResetAt,omitempty"`    // QUOTA_EXHAUSTED, when the policy resets
	Reason         string `json:"reason,omitempty"`         // QUOTA_EXHAUSTED of an apply on a business line: LINE_EXHAUSTED, WATERMARK, POOL_EXHAUSTED, EXHAUSTED (the resource itself)
}

// httpStatus is the HTTP status of each domain code: the HTTP map of
// quota.CodeOf. A code not listed (CodeInternal) is 500.
var httpStatus = map[quota.Code]int{
	quota.CodeInvalidArgument:    http.StatusBadRequest,
	quota.CodePermissionDenied:   http.StatusForbidden,
	quota.CodeResourceNotFound:   http.StatusNotFound,
	quota.CodeSessionNotFound:    http.StatusNotFound,
	quota.CodeNotFound:           http.StatusNotFound,
	quota.CodeSessionNotActive:   http.StatusConflict,
	quota.CodeSessionConflict:    http.StatusConflict,
	quota.CodeConflict:           http.StatusConflict,
	quota.CodePolicyInUse:        http.StatusConflict,
	quota.CodeReconcileSkipped:   http.StatusConflict,
	quota.CodeQuotaExhausted:     http.StatusTooManyRequests,
	quota.CodeBackendUnavailable: http.StatusServiceUnavailable,
	quota.CodeCircuitOpen:        http.StatusServiceUnavailable,
}

// classify maps an error to its HTTP status and wire code: the transport's
// own errors here, every other through quota.CodeOf and httpStatus. It is
// the one place that does so.
func classify(err error) (int, string) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return http.StatusRequestEntityTooLarge, CodePayloadTooLarge
	case errors.Is(err, errRequestTimeout):
		return http.StatusRequestTimeout, CodeRequestTimeout
	case errors.Is(err, errMediaType):
		return http.StatusUnsupportedMediaType, CodeUnsupportedMedia
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized, CodeUnauthenticated
	}
	code := quota.CodeOf(err)
	status, ok := httpStatus[code]
	if !ok {
		return http.StatusInternalServerError, CodeInternal
	}
	return status, string(code)
}

// writeError answers with the status and JSON body for err. 5xx errors are
// logged here, once: a 500 at error level, a 503 (a backend down, which the
// breaker and the alerts already report) at warn, and the fast 503s of an
// open circuit breaker at debug, since an outage would log one per request;
// 4xx are the caller's and are not logged above debug. A 5xx message on the
// wire never carries the underlying error (addresses, SQL): the log does.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := classify(err)
	body := errorBody{Code: code, Message: err.Error()}
	var na *quota.NotActiveError
	if errors.As(err, &na) {
		body.Status = string(na.Status)
	}
	switch {
	case status >= 500:
		if r.Context().Err() == nil {
			level := zap.WarnLevel
			switch {
			case status == http.StatusInternalServerError:
				level = zap.ErrorLevel
			case code == CodeCircuitOpen:
				level = zap.DebugLevel
			}
			s.log.Log(level, "request failed", zap.String("route", routeOf(r)), zap.String("code", code), zap.Error(err))
		}
		if status == http.StatusServiceUnavailable {
			retry := "1"
			var coe *quota.CircuitOpenError
			if errors.As(err, &coe) {
				retry = strconv.Itoa(max(1, int(math.Ceil(coe.RetryAfter.Seconds()))))
				body.Message = coe.Error()
			} else {
				body.Message = "a backend (Redis or MySQL) did not answer in time; " + retryHint(routeOf(r))
			}
			w.Header().Set("Retry-After", retry)
		}
		if status == http.StatusInternalServerError {
			body.Message = "internal error" // details are in the log, not on the wire
		}
	default:
		s.log.Debug("request refused", zap.String("route", routeOf(r)), zap.String("code", code), zap.Error(err))
		if errors.Is(err, errContentCoding) {
			w.Header().Set("Accept-Encoding", "identity")
		}
	}
	writeJSON(w, status, body)
}

// retryHint is the 503's advice for a request of route (routeOf): what to
// send again. Every hot-path call is idempotent by session id: an apply
// sent again with the same sessionId replays its first answer (never a
// second reservation), a finish with the same actual replays, a heartbeat
// renews the lease once more.
func retryHint(route string) string {
	switch route {
	case "/quota/apply":
		return "retry the apply with the same sessionId (it replays, it never reserves twice)"
	case "/quota/finish":
		return "retry the finish with the same sessionId and actualUsedAmount (a repeat replays)"
	case "/quota/heartbeat":
		return "retry the heartbeat"
	}
	return "retry the request"
}

// jsonContentType is the Content-Type header value of every JSON answer,
// shared: net/http only reads it (and Header.Add would copy, its capacity
// being its length), so no answer allocates its own.
var jsonContentType = []string{"application/json"}

// contentLengths are the Content-Length header values of bodies shorter
// than 1 KiB, shared as jsonContentType is.
var contentLengths = func() [][]string {
	v := make([][]string, 1024)
	for n := range v {
		v[n] = []string{strconv.Itoa(n)}
	}
	return v
}()

// answerBufs are the buffers of the answers that encode themselves
// (jsonAppender): w.Write copies the body, so a buffer is reused at once.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeJSON writes v as the JSON body with the given status: by its own
// appendJSON when it has one, else by encoding/json (the same bytes).
func writeJSON(w http.ResponseWriter, status int, v any) {
	if a, ok := v.(jsonAppender); ok {
		writeAppended(w, status, a)
		return
	}
	if eb, ok := v.(errorBody); ok {
		eb.Message = quota.ClipMessage(eb.Message) // it may quote a 1 MiB field name
		v = eb
	}
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"success":false,"code":"INTERNAL_ERROR","message":"encode response"}`)
	}
	writeBody(w, status, append(b, '\n'))
}

// writeAppended is writeJSON of an answer that writes its own JSON. The
// hot-path handlers call it with their answer's own type, which is then
// not boxed into an interface (an allocation of the whole answer).
func writeAppended[A jsonAppender](w http.ResponseWriter, status int, a A) {
	bp := answerBufs.Get().(*[]byte)
	b := append(a.appendJSON((*bp)[:0]), '\n')
	writeBody(w, status, b)
	*bp = b
	answerBufs.Put(bp)
}

// WriteError writes the error body {success:false, code, message} with
// status, as every error answer of the API is written (the message clipped
// as quota.ClipMessage does); for handlers mounted beside the API (the
// console's unknown paths) that answer in its shape.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Code: code, Message: message})
}

// writeBody writes the JSON body b (newline included) with the given status.
func writeBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	if len(b) < len(contentLengths) {
		h["Content-Length"] = contentLengths[len(b)]
	} else {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	w.WriteHeader(status)
	_, _ = w.Write(b) //nolint:gosec // G705: b is JSON (encoding/json or the appenders' same escaping), served as application/json
}

// ErrorBody is the JSON error body (errorBody) of an answer the HTTP engine
// gives before any handler runs (internal/httpserve: a malformed request
// 400, a request not read in time 408, a body over the limit 413, a header
// section over the limit 431, a panic 500): the same shape and codes as the
// handlers' own answers.
func ErrorBody(status int, message string) []byte {
	code := CodeInvalidArgument
	switch status {
	case http.StatusRequestTimeout:
		code = CodeRequestTimeout
	case http.StatusRequestEntityTooLarge:
		code = CodePayloadTooLarge
	case http.StatusInternalServerError:
		code = CodeInternal
	}
	b, err := json.Marshal(errorBody{Code: code, Message: message})
	if err != nil { // an errorBody of strings always marshals
		panic(err)
	}
	return b
}
