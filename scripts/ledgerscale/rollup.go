package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
)

// rollupMain is `ledgerscale rollup`: one lifecycle pass over -resource, as
// `quota-center ledger prune --resource` runs it (no pause, retention off),
// but at the clock -now (RFC 3339; default the fill's T + 10 minutes) so
// that a fill whose T is not the current hour is rolled up as the job
// would at T. -closed-periods-only is QC_LEDGER_CLOSED_PERIODS_ONLY: the
// rule of main before the current period's past hours were rolled up.
func rollupMain(args []string) {
	fs := flag.NewFlagSet("rollup", flag.ExitOnError)
	dsn := fs.String("dsn", "", "DSN of the ledger's database (required)")
	resource := fs.String("resource", "res-0", "resource rolled up")
	nowFlag := fs.String("now", "", "the job's clock, RFC 3339 (default: the fill's T + 10 minutes)")
	closed := fs.Bool("closed-periods-only", false, "stop at the current period's start (main's rule)")
	batch := fs.Int("batch", 10000, "rows per rollup step")
	_ = fs.Parse(args)
	if *dsn == "" {
		fs.Usage()
		os.Exit(2)
	}
	if err := rollup(*dsn, *resource, *nowFlag, *closed, *batch); err != nil {
		log.Fatal(err)
	}
}

func rollup(dsn, resource, nowFlag string, closed bool, batch int) error {
	ctx := context.Background()
	st, err := mysqlstore.Open(ctx, dsn, mysqlstore.Options{QueryTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer st.Close()
	var now time.Time
	if nowFlag != "" {
		if now, err = time.Parse(time.RFC3339, nowFlag); err != nil {
			return fmt.Errorf("-now: %w", err)
		}
	} else {
		admin, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer admin.Close()
		tEnd, err := endOfData(ctx, admin)
		if err != nil {
			return err
		}
		now = tEnd.Add(10 * time.Minute)
	}
	pol, err := st.GetPolicy(ctx, resource)
	if err != nil {
		return err
	}
	cfg := lifecycle.Config{Interval: time.Hour, RollupAfter: 25 * time.Hour, Batch: batch, DeleteBatch: batch,
		ClosedPeriodsOnly: closed, Now: func() time.Time { return now }}
	job := lifecycle.New(cfg, st, st, &period.Scheduler{}, zap.NewNop(), nil)
	t0 := time.Now()
	rep := job.Visit(ctx, pol)
	if rep.Error != "" {
		return fmt.Errorf("rollup %s: %s", resource, rep.Error)
	}
	fmt.Printf("rollup %s at %s (closed periods only: %v): %d rows in %s, watermark %s, blocked %v\n",
		resource, now.Format(time.RFC3339), closed, rep.RowsRolled, time.Since(t0).Round(time.Millisecond),
		rep.RolledTo.Format(time.RFC3339), rep.Blocked)
	return nil
}
