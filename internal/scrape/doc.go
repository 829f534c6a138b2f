// Package scrape is the fan-out of the scrape-time collectors (balances and
// pools in internal/httpapi, forecasts in internal/admin): one read per
// used resource, run concurrently and bounded, so that the Redis client
// auto-pipelines them and a scrape's round trips do not grow with the
// number of used resources (issue 23 §1).
//
// It imports nothing of the project's; both collector packages import it.
package scrape
