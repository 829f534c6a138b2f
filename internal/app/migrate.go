package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
)

// Migrate runs `quota-center migrate`: it applies the embedded ledger
// migrations to QC_MYSQL_DSN. It is idempotent: applied migrations are
// skipped.
func Migrate(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, _, err := config.Load("migrate", args)
	if err != nil {
		return err
	}
	if cfg.MySQL.DSN == "" {
		return errors.New("migrate needs QC_MYSQL_DSN (or --mysql-dsn)")
	}
	st, err := mysqlstore.Open(ctx, cfg.MySQL.DSN, mysqlstore.Options{QueryTimeout: cfg.MySQL.Timeout})
	if err != nil {
		return fmt.Errorf("connect mysql: %w", err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	_, err = fmt.Fprintln(stdout, "migrations applied to", config.RedactDSN(cfg.MySQL.DSN))
	return err
}
