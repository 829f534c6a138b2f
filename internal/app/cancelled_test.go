package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestRefusedApplyStaysUnchargedWhenRedisLosesItsTombstone reproduces the
// rest of G1 (docs/reliability.md): an apply whose ledger INSERT committed
// but whose answer was lost (and could not be read back) answers 503 and
// gives its reservation back, leaving a CANCELLED tombstone in Redis only.
// When Redis then loses every key of the resource (restart empty, flush)
// before reconciliation reaches the row, the rebuild took the USING row for
// a live session and the sweeper charged its whole grant as LEAKED: a 503
// charged. The ledger must know the row was cancelled. Then a retry of the
// same apply starts afresh (it is granted and charged as any session).
func TestRefusedApplyStaysUnchargedWhenRedisLosesItsTombstone(t *testing.T) {
	s, p, ledger := startBehindMySQLProxy(t, "--reconcile-interval", "500ms", "--reconcile-grace", "2s")
	rdb, _ := realRedis(t)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 1})
	// One session first, so the policy is cached when MySQL stops answering.
	_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 10})
	if code, f, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{
		"resourceName": r, "sessionId": a["sessionId"], "actualUsedAmount": 10}); code != http.StatusOK {
		t.Fatalf("first finish: %d %v", code, f)
	}

	// The reproduction needs the refused apply's row landed: its INSERT ran
	// and only the answer was lost. On a loaded machine the INSERT may still
	// be executing when the apply answers 503 (so wait for it), or may not
	// have been sent before the apply gave up (then no row ever lands, the
	// reservation was given back, and the attempt is made again).
	var id string
	var apply map[string]any
	for attempt := 1; ; attempt++ {
		id = "refused-" + testenv.RandomSuffix()
		apply = map[string]any{"resourceName": r, "applyAmount": 300, "sessionId": id}
		p.DropReplies(2 * time.Second)
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", apply)
		if code != http.StatusServiceUnavailable {
			t.Fatalf("apply while MySQL's answers are lost: %d %v, want 503", code, out)
		}
		// The statements ran, their answers were lost: the row is there
		// (USING, or CANCELLED already if the mark ran although its answer
		// was lost).
		var landed string
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			landed = ""
			_ = ledger.QueryRow("SELECT status FROM quota_usage WHERE session_id = ?", id).Scan(&landed)
			if landed != "" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if landed == "USING" || landed == "CANCELLED" {
			break
		}
		if landed != "" {
			t.Fatalf("the refused apply's row is %s, want USING or CANCELLED", landed)
		}
		if attempt == 5 {
			t.Fatalf("in %d attempts no refused apply's row landed; the reproduction needs one", attempt)
		}
		t.Logf("attempt %d: the refused apply's INSERT never reached MySQL; again once MySQL answers", attempt)
		// Before the next attempt the lost answers' window must be over and
		// the MySQL breaker closed again (it stays open 5 s after the
		// window's failures; an apply refused by the open breaker sends no
		// INSERT at all): wait for a whole session to go through.
		time.Sleep(2 * time.Second)
		testenv.Eventually(t, 20*time.Second, "a session applied and finished after the window", func() bool {
			code, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 1})
			if code != http.StatusOK {
				return false
			}
			code, _, _ = call(t, s, http.MethodPost, "/quota/finish", map[string]any{
				"resourceName": r, "sessionId": a["sessionId"], "actualUsedAmount": 0})
			return code == http.StatusOK
		})
	}
	// Redis loses every key of the resource, the tombstone with them.
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "qc:{"+r+"}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %v %v", r, keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	rowStatus := func() string {
		var st string
		_ = ledger.QueryRow("SELECT status FROM quota_usage WHERE session_id = ?", id).Scan(&st)
		return st
	}
	testenv.Eventually(t, 20*time.Second, "the refused apply's row settled, nothing charged and nothing reserved", func() bool {
		code, out, _ := call(t, s, http.MethodGet, "/quota/status?resourceName="+r, nil)
		if code != http.StatusOK {
			return false // MySQL still unreachable: the rebuild waits
		}
		if used := num(t, out, "usedAmount"); used != 10 {
			t.Fatalf("the apply answered 503 was charged: usedAmount %d (row %s), want 10", used, rowStatus())
		}
		if st := rowStatus(); st == "LEAKED" || st == "FINISHED" {
			t.Fatalf("the refused apply's row is %s", st)
		}
		return rowStatus() == "CANCELLED" && num(t, out, "reservedAmount") == 0 && num(t, out, "activeSessions") == 0
	})
	var charged, refunded int64
	if err := ledger.QueryRow("SELECT charged_amount, refunded_amount FROM quota_usage WHERE session_id = ?", id).
		Scan(&charged, &refunded); err != nil || charged != 0 || refunded != 300 {
		t.Fatalf("the CANCELLED row: charged %d refunded %d %v, want 0 and 300", charged, refunded, err)
	}

	// The client retries the 503 with the same body: it starts afresh.
	code, out, _ := call(t, s, http.MethodPost, "/quota/apply", apply)
	if code != http.StatusOK || num(t, out, "grantedAmount") != 300 || out["replayed"] == true {
		t.Fatalf("retry of the refused apply: %d %v, want a fresh grant of 300", code, out)
	}
	if st := rowStatus(); st != "USING" {
		t.Fatalf("after the retry the row is %s, want USING", st)
	}
	code, out, _ = call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": id, "actualUsedAmount": 120})
	if code != http.StatusOK || num(t, out, "chargedAmount") != 120 {
		t.Fatalf("finish of the retried session: %d %v", code, out)
	}
	st, _ := getStatus(t, s, r)
	if st.used != 130 || st.reserved != 0 || rowStatus() != "FINISHED" {
		t.Fatalf("after the finish: status %+v, row %s; want used 130", st, rowStatus())
	}
}
