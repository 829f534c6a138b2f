// Package lifecycle gives the ledger (quota_usage, one row per session) a
// lifecycle (issue 23 §2): a background job that, per resource with ledger
// rows to roll up or delete (Store.Candidates: a policy without such rows
// costs no statement, issue 23 §1),
//
//  1. rolls settled rows up, oldest first, into per-hour, per-period,
//     per-client, per-line sums (quota_usage_rollup) behind a watermark:
//     every row that started before it is summed exactly once. A row is
//     rolled up once it started more than RecentRows ago, up to a whole
//     UTC hour: the past hours of the current period too, so that a read
//     of the current period (every rebuild's) reads the last hour or two
//     raw (Config.ClosedPeriodsOnly stops it at the current period's
//     start, as before). A row written later with an older start (a
//     fail-open session recorded by reconciliation) is listed as below
//     (internal/mysqlstore, InsertLateSession). An open (USING) session stops the
//     rollup there until it is settled. A LEAKED or CANCELLED row settled
//     less than RollupAfter ago may still change (a late finish may true a
//     leaked one up, an apply retry revive a cancelled one): the watermark
//     passes it, but it is kept raw in a short list (read raw by the
//     readers below) and summed by a later pass once it may not; a
//     FINISHED row never changes and is summed at once;
//  2. deletes rolled-up rows that started more than Retention ago (0 =
//     keep them forever) in bounded batches, with a pause between batches.
//
// GET /admin/usage and the period totals of a rebuild or a reconciliation
// read the sums below the watermark, the listed rows kept raw below it, and
// the raw rows from it on
// (internal/mysqlstore), so their answers are the same before and after a
// rollup and a deletion. Two instances may run the job at once: each step
// holds the resource's lifecycle row lock in MySQL and commits its sums
// and the new watermark together.
//
// A dry run (Config.DryRun) writes nothing and reports, per resource, what
// a pass would roll up and delete. `quota-center ledger prune` runs one
// Pass on demand (internal/app.PruneLedger). The job exports Prometheus metrics
// (quota_ledger_*) and logs each pass.
//
// It imports quota, prometheus and zap; never the adapters.
package lifecycle
