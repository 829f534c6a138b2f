// Package failover notices that the Redis master holding a resource was
// replaced — a replica promoted after a failover (Redis Cluster or
// Sentinel) or a server restarted — and repairs that resource from the
// ledger at once, instead of at the next periodic reconciliation.
//
// Why: Redis replicates asynchronously, so a promoted replica can lack the
// last changes its master answered (a reservation, a finish). Those
// sessions' ledger rows are durable; the balance is rebuilt from them: the
// period's balance is dropped under its seed lock and the next apply seeds
// it from the ledger (totals and open sessions), as after Redis lost it;
// then a reconciliation pass of the resource settles what was in flight.
// See docs/reliability.md, "Redis failover".
//
// It imports quota, prometheus and zap; never the adapters (the Redis side
// comes in through the small interfaces declared here).
package failover
