// Package poolctl is the pools' controller loop: every 10 s, for each
// used resource with business lines, the one instance holding the
// resource's "poolctl" lock (a short Redis lock, as reconciliation uses)
// reads the pools from Redis, runs the controller (internal/pools.
// Controller: watermarks, elasticity, reclaims), applies each move with
// one atomic script that bounds it again against the live counters,
// returns the buffer releases that expired, and records every decision as
// an event (quota_pool_event) and in metrics.
//
// The controller's memory (rate samples, forecasts, modes) lives in the
// instance that holds the lock; when the lock moves, the next holder starts
// sampling afresh (one 30-s sample later it decides again). Reclaims are
// kept in the policy store, so any instance lists, confirms or cancels
// them (internal/admin), and the holder executes a confirmed one at its
// next tick.
//
// With Runner.Visits (quota-center serve), a resource whose controller is
// at rest (pools.Controller.AtRest) and that nothing changed since is not
// ticked, its lock not renewed (issue 23 §1: a quiet resource costs no
// Redis command per tick); a change, an operator release's expiry, the
// period's end or a minute brings it back.
//
// That is all it does (issue 21 §1). The operators' side of the pools
// (lines, settings, grants, releases, reclaims, the backend breakers of
// both) is internal/admin's Pools; the pools' part of the balance (the
// layout, the restored grants, the period's pool counters, which lines
// and grants a resource has) is the quota Service's, in its seed step and
// its policy+pools cache.
//
// It imports quota and pools (and zap, prometheus); never redisstore,
// mysqlstore, admin or httpapi. Its stores come from the caller behind
// the backend breakers (admin.GuardPools in internal/app).
package poolctl
