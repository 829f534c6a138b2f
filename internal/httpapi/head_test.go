package httpapi_test

import (
	"io"
	"net/http"
	"testing"
)

// HEAD is answered on every GET route as GET is, without the body (RFC
// 9110 §9.1); it was 405 on all of them, /healthz included.
func TestHeadIsAnsweredLikeGetWithoutTheBody(t *testing.T) {
	h := newHarness(t)
	h.putPolicy(t, "gpu", `{"quotaType":"COUNT","totalLimit":10}`)
	type answer struct {
		StatusCode    int
		Header        http.Header
		ContentLength int64
	}
	send := func(method, path string) (answer, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, h.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return answer{resp.StatusCode, resp.Header, resp.ContentLength}, body
	}
	for _, path := range []string{"/healthz", "/readyz", "/quota/status?resourceName=gpu", "/admin/policies", "/admin/policies/gpu",
		"/quota/status?resourceName=nope", "/quota/status?bogus=1"} {
		get, getBody := send(http.MethodGet, path)
		head, headBody := send(http.MethodHead, path)
		if head.StatusCode != get.StatusCode || len(headBody) != 0 ||
			head.Header.Get("Content-Type") != get.Header.Get("Content-Type") || head.ContentLength != int64(len(getBody)) {
			t.Errorf("HEAD %s: %d %q, %d body bytes, length %d; GET: %d %q, %d bytes",
				path, head.StatusCode, head.Header.Get("Content-Type"), len(headBody), head.ContentLength,
				get.StatusCode, get.Header.Get("Content-Type"), len(getBody))
		}
	}
	if head, _ := send(http.MethodHead, "/quota/apply"); head.StatusCode != http.StatusMethodNotAllowed || head.Header.Get("Allow") != "POST" {
		t.Errorf("HEAD /quota/apply: %d, Allow %q; want 405, Allow POST", head.StatusCode, head.Header.Get("Allow"))
	}
}
