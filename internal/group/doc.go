// Package group gathers items handed over by concurrent callers into groups
// that are sent together: the ledger's group commit (one multi-row statement
// for many requests) and Redis auto-pipelining (one round trip for many
// script calls) both use it.
//
// The policy is the one of a database's group commit (MySQL's binlog group
// commit; PostgreSQL's commit_delay, which waits only when siblings are
// active): a group is sent as soon as a send slot is free; while every slot
// is busy, arriving items keep joining the waiting group, up to MaxItems.
// So a group is what arrived while the sends before it were in flight: a
// lone request waits for nothing but its own send, a crowd shares one send,
// and groups grow with the time each send takes, with no timer. An optional
// linger (a fixed wait of a group's first item for company, even with a
// slot free) exists for callers that want it; the ledger passes 0 unless
// configured. NewSpaced makes the linger a least time between two sends
// instead (Nagle's algorithm): an item after a quiet interval goes at
// once, and under load groups go out once per interval and grow with the
// rate. The Redis pipeliner uses it (500µs by default), since Redis and
// quota-center pay a write, a read and a wake-up per pipeline.
//
// There is no goroutine of the loop's own: a caller that finds the waiting
// group full waits for room, every other caller adds its item under a
// mutex, and a group that gets a slot is sent by a sender of the loop's
// (the one that freed the slot, or a new one). With Join, the caller whose
// item starts a group sends it itself, on its own goroutine (the leader of
// a group commit, whose followers wait for their outcome anyway): the
// ledger's group commit uses it; the Redis pipeliner does not, since its
// callers must be able to leave a pipeline stuck on the wire. Both save the
// hand-off of every item to a loop goroutine, a wake-up each
// (docs/performance-notes.md, pass 4).
package group
