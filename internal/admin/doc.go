// Package admin is the operators' and SREs' side of quota-center (issue 10):
// the live session map and session history, usage sums from the ledger,
// the burn rate and exhaustion forecast, and the audited admin actions that
// go beyond PUT of a policy (merge-patch, manual reset, forced finish,
// delete). The HTTP API (internal/httpapi), the web console
// (internal/console) and the CLI (cmd/quota-center admin) sit on it.
//
// It imports the domain (internal/quota) only; the stores (redisstore,
// mysqlstore) implement the small interfaces it declares. It must not
// import an adapter, httpapi or console.
package admin
