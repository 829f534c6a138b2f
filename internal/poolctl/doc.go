// Package poolctl runs the pools controller (internal/pools.Controller) in
// the service: every 10 s, for each resource with business lines, the one
// instance holding the resource's "poolctl" lock (a short Redis lock, as
// reconciliation uses) reads the pools from Redis, decides (watermarks,
// elasticity, reclaims), applies each move with one atomic script that
// bounds it again against the live counters, and records every decision as
// an event (quota_pool_event) and in metrics.
//
// The controller's memory (rate samples, forecasts, modes) lives in the
// instance that holds the lock; when the lock moves, the next holder starts
// sampling afresh (one 30-s sample later it decides again). Reclaims are
// kept in the policy store, so any instance lists, confirms or cancels
// them, and the holder executes a confirmed one at its next tick.
//
// Beside the loop it still holds the operators' side of the pools (Admin:
// lines, settings, grants, releases, reclaims; its stores are the small
// roles LineConfig, GrantConfig, PoolJournal and LiveStore) and the
// Service's view of which resources use pools (Source: quota.PoolSource).
// The period's pool counters are not seeded here: quota seeds them with
// the balance (issue 21 §1).
//
// It imports quota and pools (and zap, prometheus); never redisstore,
// mysqlstore or httpapi.
package poolctl
