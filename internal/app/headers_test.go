package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/httpserve"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestHeadersOverTheLimitAreRefusedWith431 holds the README's limits: a
// request whose request line and headers pass the engine's limit is refused
// with 431 before routing, one just under it is served. fasthttp (the
// default): httpserve.HeaderLimit, 16 KiB, answered with the JSON error
// body; net/http: 64 KiB (Go adds 4 KiB of slack to MaxHeaderBytes),
// answered in plain text.
func TestHeadersOverTheLimitAreRefusedWith431(t *testing.T) {
	noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, e := range []struct {
		engine    string
		ok, large int
	}{
		{httpserve.EngineFast, httpserve.HeaderLimit - 1<<10, httpserve.HeaderLimit + 1<<10},
		{httpserve.EngineNetHTTP, 60 << 10, 69 << 10},
	} {
		t.Run(strings.ReplaceAll(e.engine, "/", ""), func(t *testing.T) {
			s := testenv.Start(t, testenv.Dev, "--http-engine", e.engine)
			for _, size := range []int{e.ok, e.large} {
				req, err := http.NewRequest(http.MethodGet, s.URL+"/healthz", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Padding", strings.Repeat("p", size))
				// A connection per request: net/http counts a request's header
				// bytes from when it starts reading it, so on a kept-alive
				// connection the bytes its Peek for the next request buffered
				// (up to 4 KiB) are not counted.
				resp, err := noKeepAlive.Do(req)
				if err != nil {
					t.Fatalf("%d bytes of header: %v", size, err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				want := http.StatusOK
				if size == e.large {
					want = http.StatusRequestHeaderFieldsTooLarge
				}
				if resp.StatusCode != want {
					t.Fatalf("%d KiB of header: status %d, want %d", size>>10, resp.StatusCode, want)
				}
				if size == e.large && e.engine == httpserve.EngineFast {
					var out struct {
						Success       bool
						Code, Message string
					}
					if err := json.Unmarshal(body, &out); err != nil || out.Code != "INVALID_ARGUMENT" || !strings.Contains(out.Message, "16384 bytes") {
						t.Fatalf("431 body %q (%v): want the JSON error naming the limit", body, err)
					}
				}
			}
		})
	}
}
