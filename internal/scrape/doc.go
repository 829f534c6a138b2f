// Package scrape is the fan-out of the scrape-time collectors (balances and
// pools in internal/httpapi, forecasts in internal/admin): one read per
// used resource, run concurrently and bounded (each read is still its own
// round trip: ~N/Workers rounds). The reads a collector can batch are
// made first, in a few pipelines, by its source's prefetch
// (httpapi.Prefetcher, admin.ForecastCollector.Prefetch; issue 23 §1).
//
// It imports nothing of the project's; both collector packages import it.
package scrape
