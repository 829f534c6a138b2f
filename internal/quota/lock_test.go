package quota

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// renewer is a Locker whose lock is held by its holder for the first
// renewals, then by another.
type renewer struct {
	renewals atomic.Int64
	lostAt   int64
}

func (r *renewer) TryLock(context.Context, string, string, time.Duration) (string, error) {
	return "t", nil
}
func (r *renewer) Unlock(context.Context, string, string, string) error { return nil }
func (r *renewer) RenewLock(context.Context, string, string, string, time.Duration) (bool, error) {
	return r.renewals.Add(1) < r.lostAt, nil
}

// KeepLock renews while the holder works and cancels the holder's context
// once the lock turns out to be someone else's (issue 11 §3.4).
func TestKeepLockRenewsAndStopsTheHolderWhenTheLockIsLost(t *testing.T) {
	l := &renewer{lostAt: 3}
	ctx, stop := KeepLock(context.Background(), l, nil, "r", "seed:1", "t", 30*time.Millisecond)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's context was not cancelled after the lock was lost")
	}
	if n := l.renewals.Load(); n != 3 {
		t.Fatalf("%d renewals, want 3 (two held, the third lost)", n)
	}

	// While the lock stays held, the context stays alive until stop.
	l2 := &renewer{lostAt: 1 << 62}
	ctx2, stop2 := KeepLock(context.Background(), l2, nil, "r", "seed:1", "t", 30*time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); l2.renewals.Load() < 3; time.Sleep(5 * time.Millisecond) {
		if ctx2.Err() != nil {
			t.Fatal("cancelled while the lock was held")
		}
		if time.Now().After(deadline) {
			t.Fatal("no renewals")
		}
	}
	stop2()
	if ctx2.Err() == nil {
		t.Fatal("stop did not end the context")
	}
}
