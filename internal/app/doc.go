// Package app wires quota-center together: it opens the backends (or the
// embedded dev-mode ones), builds the service, HTTP API, metrics and
// sweeper, and runs them until its context ends. cmd/quota-center calls it;
// end-to-end tests call it on port 0.
//
// The scrape's per-resource reads (issue 23 §1; scrapestatus.go,
// visitcache.go, scrapebatch.go): each collector hands the used resources
// to a prefetch that reads the ones changed since their last read
// (activity.Visits) in one batch and keeps every answer until its resource
// changes, its period ends, or its full visit is due (statuses and pool
// gauges: activity.DefaultFullVisit, 5 minutes; burn samples: a minute).
// The burn-rate sampler reads its due statuses through
// scrapeStatus.Refresh (admin.Deps.SampleStatuses): one batch a tick, kept
// as the scrape's own reads, so a change, or the sampler's one-minute full
// visit, costs one status read for the sampler and the scrape together.
package app
