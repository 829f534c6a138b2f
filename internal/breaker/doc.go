// Package breaker makes the sony/gobreaker circuit breakers that guard the
// balance store (Redis) and the ledger (MySQL): a *Breaker is a
// quota.Breaker, and every consumer of a store calls it through quota.Guard,
// so no store method needs breaker code of its own. After Failures consecutive
// backend failures (errors matching quota.ErrUnavailable) a breaker opens:
// calls fail at once with *quota.CircuitOpenError (HTTP 503
// CIRCUIT_BREAKER_OPEN with Retry-After) instead of piling up timeouts. After
// OpenFor it lets one probe through (half-open); a success closes it.
//
// Domain answers (not found, conflict, exhausted) are successes for the
// breaker; a caller's cancelled context is neither success nor failure.
//
// It imports quota, gobreaker and prometheus.
package breaker
