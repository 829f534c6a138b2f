// Package reconcile compares the live balances in Redis with the MySQL
// ledger, the source of truth, and repairs Redis from it. It runs on an
// interval and on demand (POST /admin/reconcile); a per-resource lock in
// Redis makes one instance at a time reconcile a resource.
//
// Per resource it repairs, in order:
//  1. orphan reservations: USING sessions in Redis with no ledger row,
//     older than Grace (the process died between the Redis reservation and
//     the ledger write, or the write failed and the give-back too): given
//     back;
//  2. ledger rows left behind: USING rows whose Redis session is FINISHED or
//     LEAKED (the ledger write after the Redis step failed and was never
//     retried): settled from the Redis session; and USING rows whose Redis
//     session is a CANCELLED tombstone (the apply answered 503 after an
//     insert whose outcome was unknown, and the row landed): settled with
//     nothing charged;
//  3. lost sessions: USING rows whose Redis session is gone while the
//     balance stayed (eviction, partial loss): brought back with a fresh
//     lease, their reservation being in the balance already;
//  4. balance drift of the current period: Redis charged/reserved minus the
//     ledger's. In-flight requests make a momentary difference, so a drift
//     is corrected only when neither Redis nor the ledger changed at all
//     between two reads Settle apart (Settle must exceed the ledger's write
//     timeout: then nothing was in flight), and then by a delta (HINCRBY),
//     never by overwriting. Under steady traffic the drift is reported and
//     corrected at the next quiet moment. The correction keeps the grants
//     of live sessions whose ledger row is not USING (an orphan younger
//     than Grace, say): their own give-back returns them, once (issue 22
//     §1), and it applies only on the balance it measured (adjust.lua).
//
// The drift found is exported per resource and logged.
//
// With Config.Visits (quota-center serve), a periodic pass skips a used
// resource nothing changed since its last clean pass (issue 23 §1: a quiet
// resource costs no Redis command per pass); each is still visited at
// least every FullEvery × Interval.
//
// It imports quota, prometheus and zap; never the adapters.
package reconcile
