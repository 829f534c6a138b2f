package app_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestADeadSeedersLockIsTakenOver reproduces issue 11 §3.4: a seeder killed
// while holding a period's seeding lock stalled every apply and status of
// the resource for the lock's 10 s TTL (they waited for a balance nobody
// wrote, then answered 503). The lock is now short (3 s) and renewed by a
// live holder, and a waiter that finds it expired without a balance takes
// it over and seeds: the apply is answered 200 from the rebuilt balance.
func TestADeadSeedersLockIsTakenOver(t *testing.T) {
	s := testenv.Start(t, testenv.Real)
	rdb, store := realRedis(t)
	ctx := context.Background()
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
	if code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100}); code != http.StatusOK {
		t.Fatalf("apply: %d %v", code, out)
	}
	_, st := getStatus(t, s, r)
	start, err := time.Parse(time.RFC3339Nano, st["periodStart"].(string))
	if err != nil {
		t.Fatal(err)
	}
	per := strconv.FormatInt(start.UnixMilli(), 10)
	// Redis lost the balance, and a seeder took the lock and died.
	if err := rdb.Del(ctx, "qc:{"+r+"}:b:"+per).Err(); err != nil {
		t.Fatal(err)
	}
	if tok, err := store.TryLock(ctx, r, "seed:"+per, 3*time.Second); err != nil || tok == "" {
		t.Fatalf("the dead seeder's lock: %q, %v", tok, err)
	}
	code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100})
	if code != http.StatusOK {
		t.Fatalf("apply while a dead seeder holds the lock: %d %v, want 200 after the lock expired and was taken over", code, out)
	}
	if got, _ := getStatus(t, s, r); got.reserved != 200 {
		t.Fatalf("rebuilt balance %+v, want both grants reserved", got)
	}
}
