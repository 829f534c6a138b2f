// Package sdktest holds the tests of the Go SDK (api/client: Manager,
// Lease, LocalPool) against the real service: app.Serve on dev-mode and on
// real backends, started on 127.0.0.1:0 by internal/testenv, with a
// switchable proxy in front of it to play a center that is down, slow or
// answering Retry-After. It has no non-test code but this comment; nothing
// imports it, and it must not be imported.
package sdktest
