// Package client is the Go client and SDK of the quota-center HTTP API.
//
// Most services want the SDK: NewManager returns a Manager whose Acquire and
// Do open sessions that heartbeat and finish themselves (with a local leak
// guard and client-made UUIDv7 session ids), behind a circuit breaker,
// retries with backoff and a fallback chosen per resource (fail closed,
// fail open with the usage reported later, durably with WithFailOpenSpool,
// or a function); LocalPool serves high-rate use from local batches.
// docs/sdk.md describes the whole contract. What follows is the plain
// Client underneath (New), one method per endpoint, used by the Manager and
// available as Manager.Client.
//
// A business service reserves an amount of a limited resource with Apply,
// which opens a session (a lease), keeps the session alive with Heartbeat
// every HeartbeatIntervalSeconds, and reports its real usage with Finish;
// whatever was granted but not used is refunded. Status reads a resource's
// balance in its current period. PutPolicy, GetPolicy and ListPolicies manage
// policies, Audit reads the audit log and Reconcile runs reconciliation
// (admin endpoints).
//
// Amounts (applyAmount, grantedAmount, totalLimit, …) are integers in the
// unit of the resource's policy: seconds for DURATION, calls for COUNT,
// tokens for TOKENS and bytes for BANDWIDTH. They range from 1 to 2^53−1
// (an actual usage may be 0). Durations on the wire are whole seconds.
//
// # Errors
//
// Every non-2xx answer is returned as a *Error carrying the HTTP status, the
// server's error code and message, the Retry-After delay when the server sent
// one, and for some codes the session status or the remaining quota. Match
// codes with errors.Is against the sentinel values:
//
//	resp, err := c.Apply(ctx, client.ApplyRequest{ResourceName: "llm_tokens", ApplyAmount: 4096})
//	switch {
//	case errors.Is(err, client.ErrQuotaExhausted):
//		var e *client.Error
//		errors.As(err, &e)
//		// back off for e.RetryAfter (0 when the policy never resets)
//	case err != nil:
//		// ...
//	}
//
// Transport failures (connection refused, timeouts, a cancelled context) are
// returned as they come from net/http, not as a *Error.
//
// # Retries
//
// The plain Client never retries (the Manager does). Apply and Finish are idempotent by session id:
// when the caller chooses the SessionID of an ApplyRequest itself, an Apply
// repeated with the same session id, resource and amounts returns the first
// answer without reserving twice, and a Finish repeated with the same session
// id and actual usage returns the first settlement without charging twice. So
// both are safe to retry after a transport error or a 503 BACKEND_UNAVAILABLE,
// as long as the same SessionID is reused. Heartbeat is naturally idempotent.
// Reusing a session id with different arguments fails with
// ErrSessionConflict.
//
// # Concurrency
//
// A *Client is safe for concurrent use by many goroutines and should be
// shared: it keeps one http.Client whose Transport pools up to 256 idle
// connections per host.
package client
