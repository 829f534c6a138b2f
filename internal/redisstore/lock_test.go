package redisstore

import (
	"testing"
	"time"
)

func TestLockIsExclusiveAndIdempotentForItsHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		token, err := e.s.TryLock(ctx, e.res, "seed:1", time.Minute)
		if err != nil || token == "" {
			t.Fatalf("first lock: %q, %v", token, err)
		}
		if other, err := e.s.TryLock(ctx, e.res, "seed:1", time.Minute); err != nil || other != "" {
			t.Fatalf("second holder got %q, %v; want refused", other, err)
		}
		// go-redis resends a script call after a timeout: the resend carries
		// the same token and must find the lock its own.
		n, err := lockScript.Run(ctx, e.rdb, []string{prefix(e.res) + "lock:seed:1"}, token, 60000).Int64()
		if err != nil || n != 1 {
			t.Fatalf("resent lock call: %d, %v; want 1", n, err)
		}
		if err := e.s.Unlock(ctx, e.res, "seed:1", "not-the-token"); err != nil {
			t.Fatal(err)
		}
		if again, _ := e.s.TryLock(ctx, e.res, "seed:1", time.Minute); again != "" {
			t.Fatal("a wrong token released the lock")
		}
		if err := e.s.Unlock(ctx, e.res, "seed:1", token); err != nil {
			t.Fatal(err)
		}
		if again, err := e.s.TryLock(ctx, e.res, "seed:1", time.Minute); err != nil || again == "" {
			t.Fatalf("lock after release: %q, %v", again, err)
		}
	})
}
