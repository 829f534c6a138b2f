package httpserve_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/httpserve"
)

// TestTheEngineRefusesWithAJSONBody: what fasthttp refuses before the
// handler runs gets the status net/http gives it and, unlike net/http's
// plain text, the service's JSON error body (httpapi.ErrorBody).
func TestTheEngineRefusesWithAJSONBody(t *testing.T) {
	s := start(t, httpserve.EngineFast, echo, httpserve.Options{MaxBodyBytes: 1024, ReadTimeout: 300 * time.Millisecond,
		ReadHeaderTimeout: 300 * time.Millisecond, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	big := strings.Repeat("x", 2000)
	for _, c := range []struct {
		name, req string
		status    int
		code      string
		message   string
	}{
		{"declared body over the limit", fmt.Sprintf("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", len(big), big),
			413, "PAYLOAD_TOO_LARGE", "request body too large: limit is 1024 bytes"},
		{"chunked body over the limit", fmt.Sprintf("POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big),
			413, "PAYLOAD_TOO_LARGE", "request body too large: limit is 1024 bytes"},
		{"header section over the limit", "GET /p HTTP/1.1\r\nHost: h\r\nX-Pad: " + strings.Repeat("p", httpserve.HeaderLimit) + "\r\n\r\n",
			431, "INVALID_ARGUMENT", "request header too large: limit is 16384 bytes"},
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "INVALID_ARGUMENT", "malformed HTTP request"},
		{"target fasthttp cannot parse", "GET %zz HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer s3cret\r\n\r\n", 400, "INVALID_ARGUMENT", "malformed HTTP request"},
		{"target net/url cannot parse", "GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400, "INVALID_ARGUMENT", "malformed request target"},
		{"HTTP/2.0 request line", "GET /p HTTP/2.0\r\nHost: h\r\n\r\n", 505, "INVALID_ARGUMENT", `HTTP version not supported: "HTTP/2.0"`},
		{"body not sent within the read timeout", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc", 408, "REQUEST_TIMEOUT", "request not read in time"},
	} {
		resp, body := raw(t, s.addr, c.req)
		var out struct {
			Success       bool
			Code, Message string
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Errorf("%s: status %d, body %q is not JSON: %v", c.name, resp.StatusCode, body, err)
			continue
		}
		if strings.Contains(body, "s3cret") {
			t.Errorf("%s: the answer quotes the request's headers: %q", c.name, body)
		}
		if resp.StatusCode != c.status || out.Success || out.Code != c.code || !strings.Contains(out.Message, c.message) ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s %q (%s), want %d %s %q", c.name, resp.StatusCode, out.Code, out.Message, resp.Header.Get("Content-Type"), c.status, c.code, c.message)
		}
	}
	// The server still serves after each.
	if resp, body := raw(t, s.addr, "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusOK || echoed(t, body).Path != "/ok" {
		t.Fatalf("after the refusals: %d %q", resp.StatusCode, body)
	}
}

// TestAPanicIsAnswered500: a panic the handler lets out is answered 500
// with the JSON body and the connection closed; the server goes on
// serving. http.ErrAbortHandler the same, without a log line.
func TestAPanicIsAnswered500(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Before", "1")
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
	})
	s := start(t, httpserve.EngineFast, h, httpserve.Options{})
	for _, path := range []string{"/panic", "/abort"} {
		resp, body := raw(t, s.addr, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != http.StatusInternalServerError || !resp.Close || resp.Header.Get("X-Before") != "" ||
			!strings.Contains(body, `"code":"INTERNAL_ERROR"`) {
			t.Errorf("%s: %d close=%v X-Before=%q %q", path, resp.StatusCode, resp.Close, resp.Header.Get("X-Before"), body)
		}
	}
	if resp, _ := raw(t, s.addr, "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the panics: %d", resp.StatusCode)
	}
}

// TestUnknownEngineIsRefused: New names the engines it knows.
func TestUnknownEngineIsRefused(t *testing.T) {
	_, err := httpserve.New(echo, httpserve.Options{Engine: "nginx"})
	if err == nil || !strings.Contains(err.Error(), `"nginx"`) || !strings.Contains(err.Error(), "fasthttp") {
		t.Fatalf("New with engine nginx: %v", err)
	}
}
