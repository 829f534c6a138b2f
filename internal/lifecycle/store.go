package lifecycle

import (
	"context"
	"time"
)

// Store is the ledger side of the lifecycle (internal/mysqlstore).
type Store interface {
	// RollupStep sums at most about batch ledger rows of resource, the
	// oldest not yet rolled up (start time at or after the watermark and
	// before target), into the rollup table and moves the watermark past
	// them, in one transaction under the resource's lifecycle row lock. It
	// stops before the first USING row. A LEAKED or CANCELLED row settled
	// at or after settledBefore (end time) may still change (a FINISHED row
	// never does): the watermark passes it, but it is left out of the sums
	// and kept raw in a list that the readers of the rolled-up range read
	// too. A step that ends done or blocked also sums the listed rows that
	// settled before settledBefore, and takes them off the list. Rows
	// counts the rows summed. Errors: one wrapping quota.ErrUnavailable
	// when the database cannot be reached (nothing written).
	RollupStep(ctx context.Context, resource string, target, settledBefore time.Time, batch int) (RollupStep, error)
	// DeleteStep deletes at most about batch ledger rows of resource that
	// started before both before and the watermark and are rolled up (not
	// USING, not kept raw in RollupStep's list). Errors: as RollupStep (nothing deleted).
	DeleteStep(ctx context.Context, resource string, before time.Time, batch int) (DeleteStep, error)
	// Preview counts what a pass would do without writing: the rows a
	// rollup to target would sum and the rows that would then be deleted
	// (started before deleteBefore; zero deleteBefore = none). It reads
	// the whole range once: a manual check, not a per-pass query.
	Preview(ctx context.Context, resource string, target, settledBefore, deleteBefore time.Time) (Preview, error)
	// Candidates lists, in name order, the resources after the name after
	// ("" = from the first) that may have ledger rows for a pass to roll up
	// or delete: those with a row that started before rollupBefore and at
	// or after their watermark, or (deleteBefore not zero) before both
	// their watermark and deleteBefore, or with rows kept raw in
	// RollupStep's list. It reads at most limit resources
	// that have ledger rows started before the later of the two bounds, in
	// one statement, and returns Next, the last name read ("" when no
	// resource is left): a resource with no ledger row there, as every
	// idle policy, costs nothing. The list may hold a resource with nothing
	// to do (a superset: its rows past its watermark may lie after its
	// target); a resource left out has nothing to do. Errors: as
	// RollupStep.
	Candidates(ctx context.Context, rollupBefore, deleteBefore time.Time, after string, limit int) (Candidates, error)
}

// Candidates is one page of Store.Candidates.
type Candidates struct {
	Resources []string // the candidates of the page, in name order
	Next      string   // the last resource read: the next page starts after it; "" = no page left
}

// RollupStep is what one RollupStep did.
type RollupStep struct {
	Rows     int64     // ledger rows summed
	RolledTo time.Time // the watermark after the step: rows that started before it are rolled up
	// Done: the watermark reached target (nothing left to roll up now).
	Done bool
	// Blocked: a USING row starts at RolledTo; the rollup waits for it.
	Blocked bool
}

// DeleteStep is what one DeleteStep did.
type DeleteStep struct {
	Rows int64 // ledger rows deleted
	Done bool  // nothing left to delete below the bound
}

// Preview is a dry run's count for one resource.
type Preview struct {
	RolledTo     time.Time // the watermark now
	RollupTo     time.Time // where a rollup would stop (target, or the first row it waits for)
	Blocked      bool      // it would stop before target, at a USING row
	RowsToRollUp int64     // rows it would sum (those kept raw in its list not counted)
	RowsToDelete int64     // rolled-up rows (now or after the rollup) that started before deleteBefore
}
