package mysqlstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// TestInsertSessionBeforeDeadline: InsertSessionBefore's own deadline
// works as a context's: one already passed writes nothing
// (context.DeadlineExceeded); one that passes while the row waits for
// company (BatchMaxWait) leaves the row unsent and the error is the
// deadline's; one in the future, or none (zero), writes the row.
func TestInsertSessionBeforeDeadline(t *testing.T) {
	forEachBackend(t, Options{BatchMaxRows: 2, BatchMaxWait: 300 * time.Millisecond}, func(t *testing.T, s *Store) {
		if err := s.InsertSessionBefore(testCtx(t), time.Now().Add(-time.Second), usingRec("passed", 5)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("passed: err = %v; want context.DeadlineExceeded", err)
		}
		// Alone, the row waits 300 ms for company; its deadline ends first.
		if err := s.InsertSessionBefore(testCtx(t), time.Now().Add(30*time.Millisecond), usingRec("lingering", 5)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("lingering: err = %v; want context.DeadlineExceeded", err)
		}
		for _, id := range []string{"passed", "lingering"} {
			if _, err := s.Session(testCtx(t), id); !errors.Is(err, quota.ErrSessionNotFound) {
				t.Fatalf("%s: row written past its deadline: %v", id, err)
			}
		}
		if err := s.InsertSessionBefore(testCtx(t), time.Now().Add(time.Minute), usingRec("future", 6)); err != nil {
			t.Fatalf("future: %v", err)
		}
		if err := s.InsertSessionBefore(testCtx(t), time.Time{}, usingRec("none", 7)); err != nil {
			t.Fatalf("no deadline: %v", err)
		}
		mustTotals(t, s, quota.PeriodTotals{Reserved: 13})
	})
}
