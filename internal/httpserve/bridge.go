package httpserve

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/valyala/fasthttp"
)

// newRequest builds the *http.Request of fasthttp's request. Every string
// is a copy: fasthttp reuses its buffers once the handler returns, and a
// handler may keep what it read (a cache key, a log field). The body is read
// from fasthttp's buffer itself: Read copies out of it, and a body is not
// read after its handler returned. The request target is read as sent
// (r.URL.Path unnormalised, as under net/http: the router sees what the
// client wrote); the Host header becomes r.Host and Transfer-Encoding
// r.TransferEncoding, as net/http does; the body was read whole by fasthttp
// (at most Options.MaxBodyBytes), so r.ContentLength is its length.
// Errors: a request target that net/url cannot parse.
func newRequest(ctx *fasthttp.RequestCtx) (*http.Request, error) {
	target := string(ctx.RequestURI())
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, err
	}
	r := &http.Request{
		Method: string(ctx.Method()), URL: u, RequestURI: target,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: string(ctx.Request.Header.Host()), RemoteAddr: ctx.RemoteAddr().String(),
		Header: make(http.Header, 8), Body: http.NoBody,
	}
	if u.Host != "" { // an absolute-form target names the host, as net/http reads it
		r.Host = u.Host
	}
	if !ctx.Request.Header.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	for k, v := range ctx.Request.Header.All() {
		switch key := http.CanonicalHeaderKey(string(k)); key {
		case "Host":
		case "Transfer-Encoding":
			r.TransferEncoding = append(r.TransferEncoding, string(v))
		default:
			r.Header[key] = append(r.Header[key], string(v))
		}
	}
	if body := ctx.PostBody(); len(body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	return r, nil
}

// responseWriter is the http.ResponseWriter of one request under
// EngineFast: the header map is copied into fasthttp's response when the
// status is written (later changes are ignored, as under net/http), and the
// body is appended to fasthttp's response, which writes it with its
// Content-Length once the handler has returned. A body written without a
// Content-Type gets the one sniffed from its start (http.DetectContentType)
// when the handler returns, as under net/http, whose header goes out with
// the first buffered bytes: whether or not WriteHeader came first, whatever
// the size of the first Write. A HEAD answer's body is not sent.
type responseWriter struct {
	ctx    *fasthttp.RequestCtx
	header http.Header
	status int  // 0 until the status is written
	sniff  bool // the header written had no Content-Type (nor Content-Encoding)
	head   bool
}

// Header implements http.ResponseWriter.
func (w *responseWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter. A 1xx status other than 101
// is not sent (fasthttp answers Expect: 100-continue itself); a second call
// is ignored. It panics on a status outside 100-999, as net/http does.
func (w *responseWriter) WriteHeader(status int) {
	if status < 100 || status > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(status))
	}
	if w.status != 0 || (status < 200 && status != http.StatusSwitchingProtocols) {
		return
	}
	w.status = status
	_, typed := w.header["Content-Type"]
	w.sniff = !typed && w.header.Get("Content-Encoding") == ""
	h := &w.ctx.Response.Header
	for k, vs := range w.header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.SetStatusCode(status)
}

// Write implements http.ResponseWriter. Errors: http.ErrBodyNotAllowed for
// a status that has no body (1xx, 204, 304).
func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status < 200 || w.status == http.StatusNoContent || w.status == http.StatusNotModified {
		return 0, http.ErrBodyNotAllowed
	}
	return w.ctx.Write(p)
}

// finish ends the answer when the handler returned: 200 if it wrote
// nothing, the sniffed Content-Type if it wrote a body without one.
func (w *responseWriter) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if b := w.ctx.Response.Body(); w.sniff && len(b) > 0 {
		w.ctx.Response.Header.SetContentType(http.DetectContentType(b))
	}
}
