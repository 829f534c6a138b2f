package app_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// dropResourceKeys deletes every Redis key of one resource: what a Redis
// restart without persistence does to it, without disturbing other tests.
func dropResourceKeys(t *testing.T, rdb *redis.Client, resource string) int {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "qc:{"+resource+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

func TestBalanceAndLiveSessionsAreRebuiltFromTheLedgerAfterRedisLosesThem(t *testing.T) {
	s := testenv.Start(t, testenv.Real)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "resetCron": "@daily"})

	_, open, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 300, "sessionId": "live", "clientId": "c"})
	if open["sessionId"] != "live" {
		t.Fatalf("apply: %v", open)
	}
	_, done, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 200})
	call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": done["sessionId"], "actualUsedAmount": 150})

	if n := dropResourceKeys(t, rdb, r); n == 0 {
		t.Fatal("no keys to drop: the test would prove nothing")
	}

	// 40 applies race to find the balance missing; it must be rebuilt once,
	// from the ledger (used 150, reserved 300), never from the full limit.
	const n, amount = 40, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": amount})
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusOK] != n {
		t.Fatalf("applies after the loss: %v, want %d × 200", codes, n)
	}
	st, _ := getStatus(t, s, r)
	if st.used != 150 || st.reserved != 300+n*amount || st.remaining != 1000-150-300-n*amount {
		t.Fatalf("rebuilt balance %+v, want used 150 and reserved %d", st, 300+n*amount)
	}

	// The live session came back: it heartbeats and finishes as before.
	if code, h, _ := call(t, s, http.MethodPost, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "live"}); code != http.StatusOK {
		t.Fatalf("heartbeat of the restored session: %d %v", code, h)
	}
	code, f, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "live", "actualUsedAmount": 100})
	if code != http.StatusOK || num(t, f, "refundedAmount") != 200 {
		t.Fatalf("finish of the restored session: %d %v", code, f)
	}
	st, _ = getStatus(t, s, r)
	charged, reserved, _ := ledgerSums(t, s, r)
	if st.used != 250 || st.used != charged || st.reserved != reserved {
		t.Fatalf("after the restored finish: status %+v, ledger charged %d reserved %d", st, charged, reserved)
	}
}

// TestSessionsComeBackOnTheirOwnCallsAfterRedisLosesThem: after Redis lost
// everything, the first call may be a heartbeat or a finish of a session
// opened before the loss; it must not wait for an apply or a status to
// rebuild the balance.
func TestSessionsComeBackOnTheirOwnCallsAfterRedisLosesThem(t *testing.T) {
	s := testenv.Start(t, testenv.Real)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "DURATION", "totalLimit": 1000})
	call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "hb"})
	call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 200, "sessionId": "fin"})
	dropResourceKeys(t, rdb, r)

	if code, h, _ := call(t, s, http.MethodPost, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "hb"}); code != http.StatusOK {
		t.Fatalf("first call after the loss, a heartbeat: %d %v", code, h)
	}
	dropResourceKeys(t, rdb, r)
	code, f, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "fin", "actualUsedAmount": 50})
	if code != http.StatusOK || num(t, f, "refundedAmount") != 150 {
		t.Fatalf("first call after a second loss, a finish: %d %v", code, f)
	}
	st, _ := getStatus(t, s, r)
	charged, reserved, _ := ledgerSums(t, s, r)
	if st.used != 50 || st.reserved != 100 || charged != 50 || reserved != 100 {
		t.Fatalf("status %+v, ledger charged %d reserved %d; want used 50, reserved 100", st, charged, reserved)
	}
}
