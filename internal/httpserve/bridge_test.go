package httpserve_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/httpserve"
)

// seen is what the echo handler read of a request.
type seen struct {
	Method, Path, RawQuery, RequestURI, Host, Proto string
	ContentLength                                   int64
	Multi                                           []string
	ContentType, Body                               string
}

var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(seen{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, RequestURI: r.RequestURI, Host: r.Host,
		Proto: r.Proto, ContentLength: r.ContentLength, Multi: r.Header.Values("X-Multi"),
		ContentType: r.Header.Get("Content-Type"), Body: string(b),
	})
})

func echoed(t *testing.T, body string) seen {
	t.Helper()
	var s seen
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	return s
}

// TestRequestReachesTheHandlerAsSent: method, target (not normalised: the
// router sees what the client wrote), Host, protocol, repeated headers and
// the body arrive as net/http gives them, under both engines.
func TestRequestReachesTheHandlerAsSent(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		s := start(t, engine, echo, httpserve.Options{})
		body := `{"resourceName":"r","applyAmount":1}`
		for _, c := range []struct {
			name, req string
			want      seen
		}{
			{"post", "POST /a/../b//c?x=1&y=%20z HTTP/1.1\r\nHost: example.test\r\nX-Multi: a\r\nX-Multi: b\r\nContent-Type: application/json\r\nContent-Length: " +
				fmt.Sprint(len(body)) + "\r\n\r\n" + body,
				seen{Method: "POST", Path: "/a/../b//c", RawQuery: "x=1&y=%20z", RequestURI: "/a/../b//c?x=1&y=%20z", Host: "example.test",
					Proto: "HTTP/1.1", ContentLength: int64(len(body)), Multi: []string{"a", "b"}, ContentType: "application/json", Body: body}},
			{"http/1.0", "GET /healthz HTTP/1.0\r\nHost: h\r\n\r\n",
				seen{Method: "GET", Path: "/healthz", RequestURI: "/healthz", Host: "h", Proto: "HTTP/1.0"}},
			{"absolute-form", "GET http://other.test/x?q=1 HTTP/1.1\r\nHost: h\r\n\r\n",
				seen{Method: "GET", Path: "/x", RawQuery: "q=1", RequestURI: "http://other.test/x?q=1", Host: "other.test", Proto: "HTTP/1.1"}},
		} {
			resp, got := raw(t, s.addr, c.req)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d: %s", c.name, resp.StatusCode, got)
			}
			if g := echoed(t, got); !reflect.DeepEqual(g, c.want) {
				t.Errorf("%s: the handler saw\n%+v, want\n%+v", c.name, g, c.want)
			}
		}
		// A chunked body arrives whole (its length: net/http -1, unknown
		// while streaming; fasthttp read it before the handler, so known).
		resp, got := raw(t, s.addr, "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
		if g := echoed(t, got); resp.StatusCode != http.StatusOK || g.Body != "hello world" {
			t.Errorf("chunked: status %d, body %q", resp.StatusCode, g.Body)
		}
	})
}

// TestWhatTheHandlerKeepsStaysIntact: strings and body bytes a handler
// keeps after it returned (a cache key, a log field) still say what was
// sent after the connection served more requests: the bridge copies out of
// fasthttp's reused buffers.
func TestWhatTheHandlerKeepsStaysIntact(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		type kept struct {
			method, path, key, host string
			body                    []byte
		}
		var all []kept
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			all = append(all, kept{r.Method, r.URL.Path, r.Header.Get("X-Key"), r.Host, b})
		})
		s := start(t, engine, h, httpserve.Options{})
		c := dial(t, s.addr)
		br := bufio.NewReader(c)
		const n = 50
		for i := range n {
			body := strings.Repeat(string(rune('a'+i%26)), 10+i)
			req := fmt.Sprintf("PUT /p%d HTTP/1.1\r\nHost: host%d\r\nX-Key: key-%d\r\nContent-Length: %d\r\n\r\n%s", i, i, i, len(body), body)
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			if resp, _ := readAnswer(t, br, req); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: status %d", i, resp.StatusCode)
			}
		}
		if len(all) != n {
			t.Fatalf("%d requests reached the handler, want %d", len(all), n)
		}
		for i, k := range all {
			want := kept{"PUT", fmt.Sprintf("/p%d", i), fmt.Sprintf("key-%d", i), fmt.Sprintf("host%d", i), []byte(strings.Repeat(string(rune('a'+i%26)), 10+i))}
			if !reflect.DeepEqual(k, want) {
				t.Fatalf("request %d kept %+v, want %+v", i, k, want)
			}
		}
	})
}

// answers is a handler per path, each writing its answer one way.
var answers = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/sniff":
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	case "/sniff-split": // sniffed from what was written, not the first Write alone
		_, _ = io.WriteString(w, "<ht")
		_, _ = io.WriteString(w, "ml><body>hi</body></html>")
	case "/status-then-sniff": // a status written first still gets the sniffed type
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "<html><body>gone</body></html>")
	case "/empty":
	case "/nocontent":
		w.WriteHeader(http.StatusNoContent)
		if _, err := w.Write([]byte("body")); !errors.Is(err, http.ErrBodyNotAllowed) {
			panic(fmt.Sprintf("Write after 204: %v, want http.ErrBodyNotAllowed", err))
		}
	case "/late":
		w.Header().Set("X-Early", "1")
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-Late", "1")
		_, _ = io.WriteString(w, "created")
	case "/json":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		_, _ = io.WriteString(w, `{"a":`)
		_, _ = io.WriteString(w, `1}`)
	case "/close":
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	}
})

// TestAnswersAreWrittenAsNetHTTPWritesThem: status, headers and body of
// each way of answering, the same under both engines.
func TestAnswersAreWrittenAsNetHTTPWritesThem(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		s := start(t, engine, answers, httpserve.Options{})
		for _, c := range []struct {
			method, path string
			status       int
			body         string
			header       map[string][]string // nil value: absent
		}{
			{"GET", "/sniff", 200, "<html><body>hi</body></html>", map[string][]string{"Content-Type": {"text/html; charset=utf-8"}}},
			{"GET", "/sniff-split", 200, "<html><body>hi</body></html>", map[string][]string{"Content-Type": {"text/html; charset=utf-8"}}},
			{"GET", "/status-then-sniff", 404, "<html><body>gone</body></html>", map[string][]string{"Content-Type": {"text/html; charset=utf-8"}}},
			{"GET", "/empty", 200, "", map[string][]string{"Content-Type": nil, "Content-Length": {"0"}}},
			{"GET", "/nocontent", 204, "", map[string][]string{"Content-Type": nil}},
			{"GET", "/late", 201, "created", map[string][]string{"X-Early": {"1"}, "X-Late": nil}},
			{"GET", "/json", 200, `{"a":1}`, map[string][]string{"Content-Type": {"application/json"}, "Content-Length": {"7"}, "X-Multi": {"a", "b"}}},
			{"HEAD", "/json", 200, "", map[string][]string{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}}},
			{"GET", "/close", 200, "bye", nil}, // and Connection: close (resp.Close), below
		} {
			resp, body := raw(t, s.addr, c.method+" "+c.path+" HTTP/1.1\r\nHost: h\r\n\r\n")
			if resp.StatusCode != c.status || body != c.body {
				t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, resp.StatusCode, body, c.status, c.body)
			}
			for k, want := range c.header {
				if got := resp.Header.Values(k); !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
					t.Errorf("%s %s: %s = %q, want %q", c.method, c.path, k, got, want)
				}
			}
			if resp.Close != (c.path == "/close") {
				t.Errorf("%s %s: Connection: close is %v", c.method, c.path, resp.Close)
			}
			if resp.Header.Get("Date") == "" || resp.Header.Get("Server") != "" {
				t.Errorf("%s %s: Date %q, Server %q: want a Date and no Server header", c.method, c.path, resp.Header.Get("Date"), resp.Header.Get("Server"))
			}
		}
	})
}

// TestPipelinedRequestsAreAnsweredInOrder: three requests written at once
// on one connection get their three answers in order.
func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		s := start(t, engine, echo, httpserve.Options{})
		c := dial(t, s.addr)
		var all strings.Builder
		for i := range 3 {
			fmt.Fprintf(&all, "POST /n%d HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n%d", i, i)
		}
		if _, err := c.Write([]byte(all.String())); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for i := range 3 {
			_, body := readAnswer(t, br, "POST")
			if g := echoed(t, body); g.Path != fmt.Sprintf("/n%d", i) || g.Body != fmt.Sprint(i) {
				t.Fatalf("answer %d is to %s with body %q", i, g.Path, g.Body)
			}
		}
	})
}

// TestExpectContinueIsAnswered: a client that waits for 100 Continue
// before its body gets it, then the answer.
func TestExpectContinueIsAnswered(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		s := start(t, engine, echo, httpserve.Options{})
		c := dial(t, s.addr)
		if _, err := io.WriteString(c, "POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
			t.Fatalf("first line %q (%v), want 100 Continue", line, err)
		}
		if _, err := br.ReadString('\n'); err != nil { // the empty line after it
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "body"); err != nil {
			t.Fatal(err)
		}
		if _, body := readAnswer(t, br, "POST"); echoed(t, body).Body != "body" {
			t.Fatalf("answer %q", body)
		}
	})
}
