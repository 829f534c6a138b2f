package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

func TestClassifyMapsEachErrorToItsStatusAndCode(t *testing.T) {
	tests := []struct {
		name   string
		give   error
		status int
		code   string
	}{
		{"a body too large", fmt.Errorf("%w: limit is 1 bytes", errBodyTooLarge), http.StatusRequestEntityTooLarge, CodePayloadTooLarge},
		{"a slow body", errRequestTimeout, http.StatusRequestTimeout, CodeRequestTimeout},
		{"a bad media type", errMediaType, http.StatusUnsupportedMediaType, CodeUnsupportedMedia},
		{"no credentials", unauthenticated("missing API key"), http.StatusUnauthorized, CodeUnauthenticated},
		{"credentials that may not", denied("not this resource"), http.StatusForbidden, CodePermissionDenied},
		{"a bad field", &quota.ValidationError{Field: "f", Reason: "r"}, http.StatusBadRequest, CodeInvalidArgument},
		{"a bad cursor", fmt.Errorf("%w: %w", admin.ErrBadCursor, &quota.ValidationError{Field: "cursor", Reason: "r"}), http.StatusBadRequest, CodeInvalidArgument},
		{"no policy", quota.ErrResourceNotFound, http.StatusNotFound, CodeResourceNotFound},
		{"no session", quota.ErrSessionNotFound, http.StatusNotFound, CodeSessionNotFound},
		{"no line", pools.ErrUnknownLine, http.StatusNotFound, CodeNotFound},
		{"no grant", pools.ErrUnknownGrant, http.StatusNotFound, CodeNotFound},
		{"no reclaim", pools.ErrUnknownReclaim, http.StatusNotFound, CodeNotFound},
		{"a session not active", &quota.NotActiveError{SessionID: "s", Status: quota.StatusLeaked}, http.StatusConflict, CodeSessionNotActive},
		{"a session conflict", quota.ErrSessionConflict, http.StatusConflict, CodeSessionConflict},
		{"a busy line", fmt.Errorf("line a: %w", admin.ErrLineBusy), http.StatusConflict, CodeConflict},
		{"a reclaim in another state", pools.ErrReclaimState, http.StatusConflict, CodeConflict},
		{"too little buffer", admin.ErrBufferShort, http.StatusConflict, CodeConflict},
		{"a policy in use", errors.Join(admin.ErrInUse, errors.New("3 live sessions")), http.StatusConflict, CodePolicyInUse},
		{"an open breaker", &quota.CircuitOpenError{Backend: "redis"}, http.StatusServiceUnavailable, CodeCircuitOpen},
		{"a backend down", quota.ErrUnavailable, http.StatusServiceUnavailable, CodeBackendUnavailable},
		{"anything else", errors.New("boom"), http.StatusInternalServerError, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code := classify(tt.give)
			if status != tt.status || code != tt.code {
				t.Fatalf("classify(%v) = %d %s, want %d %s", tt.give, status, code, tt.status, tt.code)
			}
		})
	}
}
