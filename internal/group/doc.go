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
// slot free) exists for callers and tests that want it; both production
// users pass 0.
package group
