package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestFailOpenWithMySQLDownIsCountedInRedis: with MySQL down and Redis up,
// an apply of a failMode OPEN resource (one without business lines, one
// with) is counted live in Redis and flagged (docs/design.md §8), so its
// heartbeat works and its use reaches the books once MySQL is back. The
// lines lookup (then poolctl.Source, now the quota Service's policy+pools
// cache) used to fail first, once its cached answer was past its TTL: the
// grant was answered with remainingQuota −1, recorded nowhere, and its
// heartbeat and finish answered 404.
func TestFailOpenWithMySQLDownIsCountedInRedis(t *testing.T) {
	const ttl = 200 * time.Millisecond
	s, p, ledger := startBehindMySQLProxy(t, "--policy-cache-ttl", ttl.String(),
		"--reconcile-interval", "300ms", "--reconcile-grace", "1s")
	plain, lined := testenv.Resource(t), testenv.Resource(t)
	lineOf := map[string]string{plain: "", lined: "a"}
	for r := range lineOf {
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "failMode": "OPEN", "leakThresholdSeconds": 60})
	}
	if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+lined+"/lines/a", map[string]any{"tier": "CORE", "weight": 1}); code != http.StatusCreated {
		t.Fatalf("put line: %d %v", code, out)
	}
	apply := func(r string, amount int) map[string]any {
		t.Helper()
		body := map[string]any{"resourceName": r, "applyAmount": amount}
		if lineOf[r] != "" {
			body["businessLine"] = lineOf[r]
		}
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", body)
		if code != http.StatusOK {
			t.Fatalf("apply on %s: %d %v", r, code, out)
		}
		return out
	}
	for r := range lineOf { // policies and lines cached
		apply(r, 1)
	}

	p.Suspend()
	// The cached answers expire on the server's clock: nothing to poll.
	time.Sleep(2 * ttl)
	sessions := map[string]any{}
	for r := range lineOf {
		out := apply(r, 100)
		if out["failOpen"] != true || num(t, out, "remainingQuota") < 0 {
			t.Fatalf("apply on %s with MySQL down: %v, want failOpen counted in Redis (remainingQuota known)", r, out)
		}
		sessions[r] = out["sessionId"]
		if code, hb, _ := call(t, s, http.MethodPost, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": out["sessionId"]}); code != http.StatusOK {
			t.Fatalf("heartbeat of the fail-open session on %s: %d %v", r, code, hb)
		}
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	for r, id := range sessions {
		testenv.Eventually(t, 20*time.Second, "finish of the fail-open session on "+r, func() bool {
			code, _, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": id, "actualUsedAmount": 40})
			return code == http.StatusOK
		})
		var st string
		var charged int64
		testenv.Eventually(t, 20*time.Second, "the fail-open session's use in the ledger of "+r, func() bool {
			err := ledger.QueryRow("SELECT status, charged_amount FROM quota_usage WHERE session_id = ?", id).Scan(&st, &charged)
			return err == nil && st == "FINISHED" && charged == 40
		})
	}
}
