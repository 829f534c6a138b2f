package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestErrorCodes(t *testing.T) {
	sentinels := []struct {
		status int
		code   string
		target *Error
	}{
		{400, "INVALID_ARGUMENT", ErrInvalidArgument},
		{401, "UNAUTHENTICATED", ErrUnauthenticated},
		{403, "PERMISSION_DENIED", ErrPermissionDenied},
		{404, "RESOURCE_NOT_FOUND", ErrResourceNotFound},
		{404, "SESSION_NOT_FOUND", ErrSessionNotFound},
		{404, "NOT_FOUND", ErrNotFound},
		{405, "METHOD_NOT_ALLOWED", ErrMethodNotAllowed},
		{409, "SESSION_NOT_ACTIVE", ErrSessionNotActive},
		{409, "SESSION_CONFLICT", ErrSessionConflict},
		{409, "CONFLICT", ErrConflict},
		{409, "RECONCILE_SKIPPED", ErrReconcileSkipped},
		{409, "POLICY_IN_USE", ErrPolicyInUse},
		{501, "NOT_IMPLEMENTED", ErrNotImplemented},
		{413, "PAYLOAD_TOO_LARGE", ErrPayloadTooLarge},
		{408, "REQUEST_TIMEOUT", ErrRequestTimeout},
		{415, "UNSUPPORTED_MEDIA_TYPE", ErrUnsupportedMediaType},
		{429, "QUOTA_EXHAUSTED", ErrQuotaExhausted},
		{503, "BACKEND_UNAVAILABLE", ErrBackendUnavailable},
		{503, "CIRCUIT_BREAKER_OPEN", ErrCircuitOpen},
		{500, "INTERNAL_ERROR", ErrInternal},
	}
	for _, tc := range sentinels {
		t.Run(tc.code, func(t *testing.T) {
			f := newFake(t, tc.status, `{"success":false,"code":"`+tc.code+`","message":"m `+tc.code+`"}`)
			c := newClient(t, f.srv.URL)
			_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1})
			if !errors.Is(err, tc.target) {
				t.Fatalf("err = %v, want errors.Is %s", err, tc.code)
			}
			for _, other := range sentinels {
				if other.code != tc.code && errors.Is(err, other.target) {
					t.Errorf("err also matches %s", other.code)
				}
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %T is not a *Error", err)
			}
			if e.StatusCode != tc.status || e.Code != tc.code || e.Message != "m "+tc.code {
				t.Errorf("error = %+v", e)
			}
			if !strings.Contains(err.Error(), tc.code) {
				t.Errorf("Error() = %q lacks the code", err.Error())
			}
		})
	}
}

func TestQuotaExhaustedDetails(t *testing.T) {
	f := newFake(t, 429, `{"success":false,"code":"QUOTA_EXHAUSTED","message":"not enough quota","remainingQuota":42}`)
	f.header.Set("Retry-After", "3600")
	c := newClient(t, f.srv.URL)
	_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 100})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrQuotaExhausted) {
		t.Fatalf("err = %v", err)
	}
	if e.RetryAfter != time.Hour {
		t.Errorf("RetryAfter = %v, want 1h", e.RetryAfter)
	}
	if e.RemainingQuota == nil || *e.RemainingQuota != 42 {
		t.Errorf("RemainingQuota = %v", e.RemainingQuota)
	}

	if e.Reason != "" || !e.NextResetAt.IsZero() || e.LineRemaining != nil {
		t.Errorf("Reason %q, NextResetAt %v, LineRemaining %v: the server sent none", e.Reason, e.NextResetAt, e.LineRemaining)
	}

	// A business line's refusal: reason, nextResetAt and the line's remaining.
	f.body = `{"success":false,"code":"QUOTA_EXHAUSTED","message":"x","remainingQuota":7,"lineRemaining":3,"reason":"WATERMARK","nextResetAt":"2024-05-02T00:00:00Z"}`
	_, err = c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 100, BusinessLine: "search"})
	if !errors.As(err, &e) || e.Reason != ReasonWatermark || !e.NextResetAt.Equal(mustTime(t, "2024-05-02T00:00:00Z")) ||
		e.LineRemaining == nil || *e.LineRemaining != 3 {
		t.Errorf("err = %+v, want reason WATERMARK, the next reset and lineRemaining 3", e)
	}

	// No Retry-After (never resets) and remainingQuota 0.
	f.header.Del("Retry-After")
	f.body = `{"success":false,"code":"QUOTA_EXHAUSTED","message":"x","remainingQuota":0}`
	_, err = c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 100})
	if !errors.As(err, &e) || e.RetryAfter != 0 || e.RemainingQuota == nil || *e.RemainingQuota != 0 {
		t.Errorf("err = %+v", e)
	}
}

func TestSessionNotActiveStatus(t *testing.T) {
	f := newFake(t, 409, `{"success":false,"code":"SESSION_NOT_ACTIVE","message":"session s is LEAKED","status":"LEAKED"}`)
	c := newClient(t, f.srv.URL)
	_, err := c.Heartbeat(context.Background(), HeartbeatRequest{ResourceName: "r", SessionID: "s"})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrSessionNotActive) || e.SessionStatus != "LEAKED" {
		t.Fatalf("err = %#v", err)
	}
	if e.RemainingQuota != nil {
		t.Errorf("RemainingQuota = %v, want nil", *e.RemainingQuota)
	}
}

func TestCircuitOpenRetryAfter(t *testing.T) {
	f := newFake(t, 503, `{"success":false,"code":"CIRCUIT_BREAKER_OPEN","message":"redis breaker open"}`)
	f.header.Set("Retry-After", "5")
	c := newClient(t, f.srv.URL)
	_, err := c.Finish(context.Background(), FinishRequest{ResourceName: "r", SessionID: "s", ActualUsedAmount: 1})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrCircuitOpen) || e.RetryAfter != 5*time.Second {
		t.Fatalf("err = %#v", err)
	}
	if errors.Is(err, ErrBackendUnavailable) {
		t.Error("CIRCUIT_BREAKER_OPEN matched ErrBackendUnavailable")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"1.5", 0},
		{"soon", 0},
		{"Wed, 01 May 2024 12:00:30 GMT", 30 * time.Second},
		{"Wed, 01 May 2024 11:00:00 GMT", 0}, // in the past
		{"99999999999999999999", 0},          // overflows int64: malformed
		{"9223372036854775807", time.Duration(1<<63-1) / time.Second * time.Second},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	f := newFake(t, 502, "<html><body>Bad Gateway</body></html>\n")
	f.header.Set("Content-Type", "text/html")
	c := newClient(t, f.srv.URL)
	_, err := c.Status(context.Background(), "r")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err %T %v is not a *Error", err, err)
	}
	if e.StatusCode != 502 || e.Code != "" || e.Message != "<html><body>Bad Gateway</body></html>" {
		t.Errorf("error = %+v", e)
	}
	for _, s := range []*Error{ErrInternal, ErrBackendUnavailable, ErrInvalidArgument} {
		if errors.Is(err, s) {
			t.Errorf("code-less error matched %s", s.Code)
		}
	}

	// Empty body: the status text.
	f.status, f.body = 500, ""
	_, err = c.Status(context.Background(), "r")
	if !errors.As(err, &e) || e.StatusCode != 500 || e.Message != "Internal Server Error" {
		t.Errorf("error = %+v", e)
	}

	// JSON, but not an error object.
	f.status, f.body = 404, `[1,2]`
	_, err = c.Status(context.Background(), "r")
	if !errors.As(err, &e) || e.StatusCode != 404 || e.Code != "" || e.Message != "[1,2]" {
		t.Errorf("error = %+v", e)
	}

	// A long body is cut.
	f.status, f.body = 500, strings.Repeat("é", 1000)
	_, err = c.Status(context.Background(), "r")
	if !errors.As(err, &e) || len(e.Message) > 210 || !strings.HasSuffix(e.Message, "…") {
		t.Errorf("message len %d: %q", len(e.Message), e.Message)
	}
}

func TestBadSuccessBody(t *testing.T) {
	f := newFake(t, 200, "not json")
	c := newClient(t, f.srv.URL)
	_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1})
	if err == nil {
		t.Fatal("want a decode error")
	}
	var e *Error
	if errors.As(err, &e) {
		t.Errorf("decode error should not be a *Error: %v", err)
	}
}
