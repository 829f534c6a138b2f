package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestHeadersOver64KiBAreRefusedWith431 holds the README's limit: a request
// whose headers pass 64 KiB (Go adds 4 KiB of slack to MaxHeaderBytes) is
// refused with 431 before routing; one with 60 KiB of headers is served.
func TestHeadersOver64KiBAreRefusedWith431(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	for _, c := range []struct {
		size int
		want func(int) bool
	}{
		{60 << 10, func(code int) bool { return code == http.StatusOK }},
		{69 << 10, func(code int) bool { return code == http.StatusRequestHeaderFieldsTooLarge }},
	} {
		req, err := http.NewRequest(http.MethodGet, s.URL+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Padding", strings.Repeat("p", c.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%d bytes of header: %v", c.size, err)
		}
		_ = resp.Body.Close()
		if !c.want(resp.StatusCode) {
			t.Errorf("%d KiB of header: status %d", c.size>>10, resp.StatusCode)
		}
	}
}
