package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/quota"
)

// SeedSnapshot reads, in one read-only transaction, the totals of the
// period starting at periodStart (as PeriodTotals: rolled-up rows through
// their sums) and every open (USING) row of resource, in
// id order: one consistent snapshot (REPEATABLE READ in InnoDB; a read
// transaction in SQLite), so that a rebuild of the balance counts each open
// row either in both (as the totals' reserved and as a session) or in
// neither, whatever commits meanwhile (issue 11, G7: the two reads, made
// apart, could count a row that finished in between in neither). Errors:
// one wrapping quota.ErrUnavailable when the database cannot be reached.
func (s *Store) SeedSnapshot(ctx context.Context, resource string, periodStart time.Time) (quota.PeriodTotals, []quota.UsageRecord, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	tx, err := s.readTx(ctx)
	if err != nil {
		return quota.PeriodTotals{}, nil, translate("seed snapshot "+resource, err)
	}
	defer func() { _ = tx.Rollback() }()
	// InnoDB takes the snapshot at the transaction's first read (the
	// totals); every page then sees the same committed rows.
	var t struct {
		Reserved int64 `db:"reserved"`
		Charged  int64 `db:"charged"`
	}
	if err := tx.GetContext(ctx, &t, s.periodTotalsSQL(), periodTotalsArgs(resource, periodStart)...); err != nil {
		return quota.PeriodTotals{}, nil, translate(fmt.Sprintf("seed snapshot totals %s@%d", resource, msOf(periodStart)), err)
	}
	var open []quota.UsageRecord
	q := `SELECT id, ` + strings.TrimPrefix(selectUsage, "SELECT ") +
		`WHERE status = 'USING' AND resource_name = ? AND id > ? ORDER BY id LIMIT ?`
	for after := int64(0); ; {
		var rows []struct {
			ID int64 `db:"id"`
			usageRow
		}
		if err := tx.SelectContext(ctx, &rows, q, resource, after, snapshotPage); err != nil {
			return quota.PeriodTotals{}, nil, translate("seed snapshot open sessions "+resource, err)
		}
		for _, r := range rows {
			open = append(open, r.record())
			after = r.ID
		}
		if len(rows) < snapshotPage {
			break
		}
	}
	return quota.PeriodTotals{Charged: t.Charged, Reserved: t.Reserved}, open, nil
}

// snapshotPage is how many open rows SeedSnapshot reads per statement.
const snapshotPage = 1000

// readTx begins a read-only transaction: one consistent snapshot
// (REPEATABLE READ in InnoDB; a read transaction in SQLite).
func (s *Store) readTx(ctx context.Context) (*sqlx.Tx, error) {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.dialect.name == "mysql" {
		opts.Isolation = sql.LevelRepeatableRead
	}
	return s.db.BeginTxx(ctx, opts)
}
