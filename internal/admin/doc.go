// Package admin is the operators' and SREs' side of quota-center (issue 10):
// the live session map and session history, usage sums from the ledger,
// the burn rate and exhaustion forecast, and the audited admin actions that
// go beyond PUT of a policy (merge-patch, manual reset, forced finish,
// delete). The HTTP API (internal/httpapi), the web console
// (internal/console) and the CLI (cmd/quota-center admin) sit on it.
//
// It also holds the pools' administration (Pools, issue 21 §1): business
// lines, pool settings, temporary grants, buffer releases, reclaims
// (confirm, cancel), pool events and status, each change validated,
// stored, mirrored to Redis and audited; and the backend breakers in front
// of the pools' calls of the administration and of the controller loop
// (GuardPools; the loop itself is internal/poolctl). The pools' part of
// the balance (layout, restored grants, pool counters) is written by the
// quota Service, which Pools calls for it (PoolQuota).
//
// It imports the domain (internal/quota, internal/pools) only; the stores
// (redisstore, mysqlstore) implement the small interfaces it declares. It
// must not import an adapter, httpapi, console or poolctl.
package admin
