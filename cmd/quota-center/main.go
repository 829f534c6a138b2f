// Command quota-center is the quota center service.
//
//	quota-center serve    serve the HTTP API (default)
//	quota-center migrate  apply the ledger migrations to QC_MYSQL_DSN
//	quota-center ledger prune  run one pass of the ledger's lifecycle (rollup, retention) against QC_MYSQL_DSN
//	quota-center version  print the version
//	quota-center admin    the operators' commands (policies, status, sessions, usage, reset, finish)
//
// Configuration comes from flags or QC_ environment variables; see
// internal/config and the README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/quotacenter/quota-center/internal/admincli"
	"github.com/quotacenter/quota-center/internal/app"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		if msg := err.Error(); strings.HasPrefix(msg, "quota-center:") { // the API client's errors say it already
			fmt.Fprintln(os.Stderr, msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "quota-center:", err)
		os.Exit(1)
	}
}

// run dispatches the subcommand; it returns when the command is done or ctx
// is cancelled (serve shuts down gracefully).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		if err := tuneServe(); err != nil {
			return err
		}
		app.Version = version
		return app.Serve(ctx, args, stderr, nil)
	case "migrate":
		return app.Migrate(ctx, args, stdout)
	case "admin":
		return admincli.Run(ctx, args, stdout, stderr)
	case "ledger":
		if len(args) > 0 && args[0] == "prune" {
			return app.PruneLedger(ctx, args[1:], stdout)
		}
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			_, err := fmt.Fprintln(stdout, ledgerUsage)
			return err
		}
		return fmt.Errorf("unknown ledger command %q: %s", args[0], ledgerUsage)
	case "version":
		_, err := fmt.Fprintln(stdout, "quota-center", version)
		return err
	case "help", "-h", "--help":
		_, err := fmt.Fprintln(stdout, "usage: quota-center [serve|migrate|admin|ledger prune|version] [flags]; quota-center serve -h lists the flags, quota-center admin -h the commands")
		return err
	}
	return fmt.Errorf("unknown command %q: use serve, migrate, admin, ledger or version", cmd)
}

// ledgerUsage is the help of `quota-center ledger`.
const ledgerUsage = "usage: quota-center ledger prune [--dry-run] [--resource R] [-o table|json] [flags]: " +
	"one pass of the ledger's lifecycle (rollup, then deletion past QC_LEDGER_RETENTION) against QC_MYSQL_DSN; " +
	"quota-center ledger prune -h lists the flags"
