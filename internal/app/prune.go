package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
)

// pruneOptions are the flags of `quota-center ledger prune` besides the
// configuration's.
type pruneOptions struct {
	dryRun   bool
	resource string // "" = every resource with a policy and rows to roll up or delete
	output   string // table or json
}

// PruneLedger runs `quota-center ledger prune [--dry-run] [--resource R]
// [-o table|json]`: one pass of the ledger's lifecycle job
// (internal/lifecycle: rollup into quota_usage_rollup, then deletion of
// rolled-up rows past QC_LEDGER_RETENTION) against QC_MYSQL_DSN with the
// QC_LEDGER_* settings serve uses, and prints per resource the rows it
// rolled up and deleted (with --dry-run or QC_LEDGER_DRY_RUN=true: would,
// writing nothing). Errors: a flag error (nothing done), no QC_MYSQL_DSN
// (dev mode's SQLite ledger lives in the serve process), MySQL unreachable,
// a resource without a policy, or a pass in which a resource failed (the
// table is printed first, the error says how many).
func PruneLedger(ctx context.Context, args []string, stdout io.Writer) error {
	o := pruneOptions{output: "table"}
	cfg, _, err := config.LoadWith("ledger prune", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&o.dryRun, "dry-run", false, "write nothing: report what a pass would roll up and delete")
		fs.StringVar(&o.resource, "resource", "", "run the pass for this resource only (default: every resource with a policy and ledger rows to roll up or delete)")
		fs.Func("o", "output: table or json (default table)", func(v string) error {
			if v != "table" && v != "json" {
				return errors.New("want table or json")
			}
			o.output = v
			return nil
		})
	})
	if err != nil {
		return err
	}
	if cfg.MySQL.DSN == "" {
		return errors.New("ledger prune needs QC_MYSQL_DSN (or --mysql-dsn): it does not run in dev mode, " +
			"whose SQLite ledger lives inside the serve process (its job runs there, see QC_LEDGER_DRY_RUN)")
	}
	st, err := mysqlstore.Open(ctx, cfg.MySQL.DSN, mysqlstore.Options{QueryTimeout: cfg.MySQL.Timeout})
	if err != nil {
		return fmt.Errorf("connect mysql %s: %w", config.RedactDSN(cfg.MySQL.DSN), err)
	}
	defer st.Close()
	lc := lifecycleConfig(cfg.Ledger)
	lc.DryRun = lc.DryRun || o.dryRun
	return pruneWith(ctx, st, lc, o, stdout)
}

// pruneWith runs one lifecycle pass over st with lc for o.resource (or
// every resource) and prints its reports to stdout in o.output.
func pruneWith(ctx context.Context, st *mysqlstore.Store, lc lifecycle.Config, o pruneOptions, stdout io.Writer) (err error) {
	job := lifecycle.New(lc, st, st, &period.Scheduler{}, zap.NewNop(), nil)
	var reps []lifecycle.Report
	if o.resource != "" {
		pol, err := st.GetPolicy(ctx, o.resource)
		if errors.Is(err, quota.ErrResourceNotFound) {
			return fmt.Errorf("ledger prune: no policy for resource %q", o.resource)
		}
		if err != nil {
			return fmt.Errorf("ledger prune: policy of %s: %w", o.resource, err)
		}
		reps = []lifecycle.Report{job.Visit(ctx, pol)}
	} else if reps, err = job.Pass(ctx); err != nil {
		return err
	}
	if err := printPrune(stdout, o.output, lc.DryRun, reps); err != nil {
		return err
	}
	failed := 0
	for _, r := range reps {
		if r.Error != "" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("ledger prune: %d of %d resources failed (see their errors above); the others are done", failed, len(reps))
	}
	return nil
}

// pruneResult is the JSON output of ledger prune.
type pruneResult struct {
	DryRun    bool               `json:"dryRun"`
	Resources []lifecycle.Report `json:"resources"`
}

// printPrune writes the reports as a table or as JSON.
func printPrune(w io.Writer, output string, dry bool, reps []lifecycle.Report) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(pruneResult{DryRun: dry, Resources: reps})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if dry {
		fmt.Fprintln(tw, "DRY RUN: nothing was written; the counts are what a pass would do now")
		fmt.Fprintln(tw, "RESOURCE\tWOULD_ROLL_UP\tWOULD_DELETE\tROLLED_TO\tBLOCKED\tERROR")
	} else {
		fmt.Fprintln(tw, "RESOURCE\tROLLED_UP\tDELETED\tROLLED_TO\tBLOCKED\tERROR")
	}
	for _, r := range reps {
		to := "-"
		if !r.RolledTo.IsZero() {
			to = r.RolledTo.UTC().Format(time.RFC3339)
		}
		e := r.Error
		if e == "" {
			e = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%t\t%s\n", r.Resource, r.RowsRolled, r.RowsDeleted, to, r.Blocked, e)
	}
	return tw.Flush()
}
