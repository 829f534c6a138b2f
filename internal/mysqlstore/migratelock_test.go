package mysqlstore

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// Instances starting together (init containers of a rollout) migrate one
// database at once: every Migrate succeeds and each migration is applied
// once.
func TestConcurrentMigrationsApplyEachOnce(t *testing.T) {
	first, dsn := freshMySQL(t, Options{})
	stores := []*Store{first}
	for range 3 {
		s, err := Open(testCtx(t), dsn, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(testCtx(t))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}
	var dup []int64
	if err := first.DB().SelectContext(testCtx(t), &dup,
		"SELECT version_id FROM goose_db_version WHERE is_applied GROUP BY version_id HAVING COUNT(*) > 1"); err != nil {
		t.Fatal(err)
	}
	if len(dup) > 0 {
		t.Fatalf("migrations applied more than once: %v", dup)
	}
}

// While another connection holds the database's migration lock, Migrate
// waits for it and gives up when the wait runs out, having changed nothing.
func TestMigrateWaitsForTheLock(t *testing.T) {
	s, _ := freshMySQL(t, Options{})
	ctx := testCtx(t)
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := (mysqlMigrateLock{wait: 0}).SessionLock(ctx, conn); err != nil {
		t.Fatal(err)
	}
	old := migrateLockWait
	migrateLockWait = time.Second // the shortest GET_LOCK wait
	defer func() { migrateLockWait = old }()
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "another migration held it") {
		t.Fatalf("Migrate with the lock held elsewhere: %v", err)
	}
	var tables int
	if err := s.DB().GetContext(ctx, &tables,
		"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'quota_usage'"); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatal("Migrate changed the schema without the lock")
	}
	if err := (mysqlMigrateLock{}).SessionUnlock(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after the lock was released: %v", err)
	}
}
