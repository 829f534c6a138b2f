package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestLateFinishTruesUpALeakedSessionRedisLost closes known gap G4 (issue 11
// §3.3): a session swept as LEAKED whose Redis state was then lost (Redis
// restarted empty) answered a late finish 409 SESSION_NOT_ACTIVE and stayed
// charged its whole grant. Now the late finish is trued up from the ledger
// row like any other: charged the actual usage once, the rest refunded, and
// a repeat is a replay.
func TestLateFinishTruesUpALeakedSessionRedisLost(t *testing.T) {
	s := testenv.Start(t, testenv.Real)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, lost := range []string{"the session", "every key of the resource"} {
		t.Run(lost, func(t *testing.T) {
			r := testenv.Resource(t)
			putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 1})
			_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 300})
			id := a["sessionId"].(string)
			testenv.Eventually(t, 10*time.Second, "the ledger row to be LEAKED", func() bool {
				var st string
				_ = s.Ledger.QueryRow("SELECT status FROM quota_usage WHERE session_id = ?", id).Scan(&st)
				return st == "LEAKED"
			})
			pattern := "qc:{" + r + "}:s:" + id
			if lost != "the session" {
				pattern = "qc:{" + r + "}:*"
			}
			keys, err := rdb.Keys(ctx, pattern).Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys %s: %v %v", pattern, keys, err)
			}
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			finish := map[string]any{"resourceName": r, "sessionId": id, "actualUsedAmount": 120}
			code, f, _ := call(t, s, http.MethodPost, "/quota/finish", finish)
			if code != http.StatusOK || num(t, f, "chargedAmount") != 120 || num(t, f, "refundedAmount") != 180 {
				t.Fatalf("late finish after Redis lost the leaked session: %d %v", code, f)
			}
			if code, f, _ = call(t, s, http.MethodPost, "/quota/finish", finish); code != http.StatusOK || num(t, f, "chargedAmount") != 120 {
				t.Fatalf("repeated late finish: %d %v", code, f)
			}
			charged, reserved, _ := ledgerSums(t, s, r)
			var status string
			var recovered int
			_ = s.Ledger.QueryRow("SELECT status, leak_recovered FROM quota_usage WHERE session_id = ?", id).Scan(&status, &recovered)
			st, _ := getStatus(t, s, r)
			if charged != 120 || reserved != 0 || status != "FINISHED" || recovered != 1 || st.used != 120 || st.reserved != 0 {
				t.Fatalf("after the true-up: ledger charged %d reserved %d %s leak_recovered %d; status %+v", charged, reserved, status, recovered, st)
			}
		})
	}
}
