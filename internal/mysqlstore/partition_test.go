package mysqlstore

import (
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quotacenter/quota-center/internal/quota"
)

// byDay is a RANGE partitioning of quota_usage by the start of its rows, the
// one a lifecycle would drop partitions of (two days, then the rest).
const byDay = ` PARTITION BY RANGE (start_ms) (
	PARTITION p0 VALUES LESS THAN (86400000),
	PARTITION p1 VALUES LESS THAN (172800000),
	PARTITION pmax VALUES LESS THAN MAXVALUE)`

// errUniqueKeyNeedsPartitionColumns is ER_UNIQUE_KEY_NEED_ALL_FIELDS_IN_PF:
// "A PRIMARY KEY / UNIQUE INDEX must include all columns in the table's
// partitioning function".
const errUniqueKeyNeedsPartitionColumns = 1503

// TestLedgerRangePartitioningIsBlockedBySessionKey holds the claim of
// docs/operations.md ("Partitioning by period", issue 23 §2) on real
// MariaDB: quota_usage as migrated cannot be RANGE-partitioned by start_ms;
// widening its primary key to (id, start_ms) is not enough; the one key in
// the way is the idempotency key uk_quota_usage_session_id, and without it
// the table partitions — and a session id can then be written twice, which
// is why quota-center keeps the key and deletes in bounded batches.
func TestLedgerRangePartitioningIsBlockedBySessionKey(t *testing.T) {
	s := MustMySQL(t)
	ctx := testCtx(t)
	want1503 := func(what string, err error) {
		t.Helper()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != errUniqueKeyNeedsPartitionColumns {
			t.Fatalf("%s: got %v, want MySQL error %d", what, err, errUniqueKeyNeedsPartitionColumns)
		}
	}
	_, err := s.db.ExecContext(ctx, `ALTER TABLE quota_usage`+byDay)
	want1503("partition the migrated table", err)
	_, err = s.db.ExecContext(ctx, `ALTER TABLE quota_usage DROP PRIMARY KEY, ADD PRIMARY KEY (id, start_ms)`+byDay)
	want1503("partition with the primary key widened", err)

	if _, err := s.db.ExecContext(ctx, `ALTER TABLE quota_usage DROP PRIMARY KEY, ADD PRIMARY KEY (id, start_ms),
		DROP KEY uk_quota_usage_session_id, ADD KEY idx_quota_usage_session_id (session_id)`+byDay); err != nil {
		t.Fatalf("partition without the unique session key: %v", err)
	}
	var parts int
	if err := s.db.GetContext(ctx, &parts, `SELECT COUNT(*) FROM information_schema.partitions
		WHERE table_schema = DATABASE() AND table_name = 'quota_usage'`); err != nil || parts != 3 {
		t.Fatalf("partitions: %d, %v; want 3", parts, err)
	}
	// What the key was for: the second apply of a session id is no longer
	// refused as a duplicate (quota.ErrDuplicateSession) but written again.
	rec := quota.UsageRecord{ResourceName: "r", ClientID: "c", SessionID: "s-1", GrantedAmount: 5,
		ChargedAmount: 5, StartTime: time.UnixMilli(1000), Status: quota.StatusUsing}
	for i := range 2 {
		if err := s.InsertSession(ctx, rec); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	var n int
	if err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM quota_usage WHERE session_id = 's-1'`); err != nil || n != 2 {
		t.Fatalf("rows of s-1: %d, %v; want 2 (the duplicate the unique key refuses)", n, err)
	}
}
