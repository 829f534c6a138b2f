// Package activity keeps the set of resources that are active: used by an
// apply, heartbeat, finish or charge, or changed (a policy, its lines,
// pools settings or grants), within the last window (QC_ACTIVE_WINDOW, 15
// minutes by default), or holding a lease that has not run out yet.
//
// Why: the background loops (failover watch, sweeper, reconciliation, pool
// controller, burn-rate samples) and the per-resource metrics used to visit
// every policy each pass, so 10,000 idle policies cost ~10k Redis commands/s
// and a scrape of 14-21 MB (issue 23 §1). They now visit the active
// resources only: a resource idle for a window costs nothing per second.
//
// A change makes a resource active but not used. quota-center's loops
// (sweeper, reconciliation, pool controller, burn-rate sampler) and its
// per-resource series follow Used: a resource only changed has no session
// to sweep, and reading its balance would seed it (100,000 policies
// created in a burst seeded every balance and opened the Redis breaker).
// The failover watcher follows Active (used or changed).
//
// The set is shared by every instance through Redis sorted sets (Key and
// UsedKey: member = resource, score = "active until", Unix ms), so a resource
// used only through another instance, or through one that died, is still
// swept and reconciled. The request path pays no Redis command: Touch
// updates a local map, and Run writes what changed in one ZADD a set a second
// (a resource is written again only when its "active until" moved by more
// than a tenth of the window). Readers get a set with one ZRANGEBYSCORE.
// When Redis cannot be read, Active answers the last set read joined with
// this instance's own touches.
//
// Within the active set, the loops that visit a resource each tick skip the
// ones nothing changed since their last visit (changes.go, visits.go): the
// balance store names every resource it changes (Tracker.Mutated), each
// instance publishes its changes of the last second in one ZADD on
// ChangedKey, and a Visits (one per loop) reads that log at most once a
// second and tells which resources are due: changed since their last
// clean visit, past a time the visit named (a lease's end, a period's
// end), unvisited for the loop's full-visit interval (DefaultFullVisit, 5
// minutes, or MinuteVisit for the loops that need it: the bound on a
// change the log missed and nothing detected), or all of them when the
// log was lost (EpochKey gone: Redis restarted; Tracker.Reset on a
// failover), an instance died with changes it may not have published (its
// heartbeat in InstancesKey stopped moving, for InstanceDeadAfter of the
// reader's own clock, without a clean leave: instances.go; the instances'
// clocks are never compared, so a skewed clock is not a death), or the
// log cannot be read.
//
// It imports go-redis and zap; never quota (a resource is its name).
package activity
