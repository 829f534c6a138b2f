package config

import (
	"flag"
	"fmt"
	"time"
)

// ledgerFlags declares the flags (QC_LEDGER_*) of the ledger's lifecycle.
func ledgerFlags(fs *flag.FlagSet, l *Ledger) {
	fs.DurationVar(&l.Interval, "ledger-interval", l.Interval, "how often the ledger lifecycle job runs (rollup, then deletion past the retention)")
	fs.DurationVar(&l.RollupAfter, "ledger-rollup-after", l.RollupAfter,
		"how long after its settling a LEAKED or CANCELLED ledger row holds back the rollup of its closed period (a late finish may still true it up); at least finished-retention")
	fs.DurationVar(&l.Retention, "ledger-retention", l.Retention,
		"how long raw ledger rows are kept (by start time) before rolled-up ones are deleted; 0 = keep forever")
	fs.IntVar(&l.Batch, "ledger-rollup-batch", l.Batch, "ledger rows summed per rollup step (one transaction)")
	fs.IntVar(&l.DeleteBatch, "ledger-delete-batch", l.DeleteBatch, "ledger rows deleted per delete step (one transaction)")
	fs.DurationVar(&l.Pause, "ledger-pause", l.Pause, "pause between two rollup or delete steps")
	fs.BoolVar(&l.ClosedPeriodsOnly, "ledger-closed-periods-only", l.ClosedPeriodsOnly,
		"the ledger rollup stops at each resource's current period's start (the rule before the hourly rollup of the current period): reads of the current period then read all its raw rows")
	fs.BoolVar(&l.DryRun, "ledger-dry-run", l.DryRun, "the lifecycle job only logs what it would roll up and delete")
}

// validate checks the lifecycle settings against finishedRetention.
func (l Ledger) validate(finishedRetention time.Duration) []error {
	var errs []error
	if l.Interval <= 0 || l.Pause < 0 {
		errs = append(errs, fmt.Errorf("ledger-interval must be positive and ledger-pause not negative"))
	}
	if l.RollupAfter < finishedRetention {
		errs = append(errs, fmt.Errorf("ledger-rollup-after must be at least finished-retention (%s), got %s: "+
			"a leaked row swept more recently may still be trued up by a late finish", finishedRetention, l.RollupAfter))
	}
	if l.Retention < 0 {
		errs = append(errs, fmt.Errorf("ledger-retention must be 0 (keep forever) or positive, got %s", l.Retention))
	}
	if l.Batch < 1 || l.Batch > 1000000 || l.DeleteBatch < 1 || l.DeleteBatch > 1000000 {
		errs = append(errs, fmt.Errorf("ledger-rollup-batch and ledger-delete-batch must be between 1 and 1000000"))
	}
	return errs
}
