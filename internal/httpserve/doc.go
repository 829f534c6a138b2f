// Package httpserve serves quota-center's HTTP API (an http.Handler: the
// chi router of internal/httpapi with the console) on a listener, with one
// of two engines:
//
//   - EngineFast (the default): valyala/fasthttp reads and writes the
//     connections, and each request is handed to the http.Handler
//     synchronously on fasthttp's worker goroutine through a small bridge
//     (bridge.go: an *http.Request built from copies of the request's bytes,
//     and an http.ResponseWriter that fills fasthttp's response). What it
//     saves against net/http is net/http's per-request machinery, not the
//     handler's: the background read net/http starts after every request
//     body (a goroutine, a read system call and three read-deadline changes
//     per request, there to notice a client that hangs up mid-request), and
//     fewer goroutine hand-offs per answer. docs/performance.md, "The HTTP
//     engine", has the figures (quota-center's own CPU per apply).
//   - EngineNetHTTP: net/http's *http.Server, as before 5 December 2026.
//
// The handler is the same under both: routing, authentication, body
// limits, media-type checks, metrics and every answer's JSON are
// internal/httpapi's. What differs, and is documented in
// docs/operations.md ("HTTP engine"):
//   - a request the engine itself refuses before the handler runs (a
//     malformed request, a header section over HeaderLimit, a body over
//     MaxBodyBytes, a request not read within ReadTimeout) gets a JSON error
//     body from Options.ErrorBody under EngineFast, net/http's plain text
//     under EngineNetHTTP;
//   - under EngineFast the request's context ends when the handler returns or
//     the server is closed, not when the client hangs up mid-request: an
//     apply whose caller left is completed and its session is swept as any
//     session whose caller died (the caller's retry with the same sessionId
//     is a replay);
//   - under EngineFast ReadTimeout bounds the reading of the whole request,
//     headers included (fasthttp has no separate header timeout), and the
//     header section is limited to HeaderLimit bytes (net/http: 64 KiB);
//   - EngineFast speaks HTTP/1.x only (the service never offered HTTP/2:
//     it serves no TLS).
package httpserve
