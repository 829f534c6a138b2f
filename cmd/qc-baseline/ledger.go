package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/quota"
)

// The ledger mode (--mysql-dsn): the "baseline+ledger" server of the
// benchmark, the floor of what a durable apply costs. Its script calls go
// through quota-center's own Redis path, auto-pipelined (app.OpenRedis, in
// run), as quota-center serve sends them. Each granted apply writes the
// session's USING row, and each finish settles it, through quota-center's own group commit (mysqlstore.Store's
// InsertSession and FinishSession, with the options quota-center uses by
// default, on the schema of its migrations), so the rows and the statements
// are those quota-center writes; the call is answered only once the
// statement carrying its row is committed. Nothing of quota-center's
// recovery is here (no read-back of an unknown outcome, no fail-open, no
// CANCELLED mark): a write that fails answers 503 and gives a fresh
// reservation back.

// openLedger connects to the MySQL or MariaDB database of dsn
// ("user:pass@tcp(host:3306)/dbname", go-sql-driver/mysql syntax) and
// applies quota-center's migrations to it. Errors: a DSN that does not
// parse, a server that does not answer (wrapping quota.ErrUnavailable), or a
// failed migration (no database in the DSN, say); each names its step.
func openLedger(ctx context.Context, dsn string) (*mysqlstore.Store, error) {
	st, err := mysqlstore.Open(ctx, dsn, mysqlstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("--mysql-dsn: %w", err)
	}
	if err := st.Migrate(ctx); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("--mysql-dsn: %w", err)
	}
	return st, nil
}

// recordApply writes the ledger row of a granted or replayed apply, as
// quota-center's record does: nil once it is committed (or, for a replay,
// already there). When a fresh grant's row cannot be written, the grant is
// given back (best effort, on its own deadline) and the write's error
// returned.
func (b *baseline) recordApply(ctx context.Context, cmd quota.ApplyCmd, res quota.ApplyResult) error {
	err := b.ledger.InsertSession(ctx, quota.ApplyRecord(cmd, res))
	if err == nil || (res.Outcome == quota.ApplyReplayed && errors.Is(err, quota.ErrDuplicateSession)) {
		return nil
	}
	if res.Outcome == quota.ApplyGranted {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = b.store.Cancel(cctx, cmd.ResourceName, cmd.SessionID)
	}
	return fmt.Errorf("record session %s: %w", cmd.SessionID, err)
}

// recordFinish settles the ledger row of a finish the store did (or
// replayed), as quota-center's settle does (quota.FinishRecord): nil once
// it is committed.
func (b *baseline) recordFinish(ctx context.Context, sessionID string, res quota.FinishResult) error {
	err := b.ledger.FinishSession(ctx, quota.FinishRecord(b.resource, sessionID, res))
	if err != nil {
		return fmt.Errorf("settle session %s: %w", sessionID, err)
	}
	return nil
}
