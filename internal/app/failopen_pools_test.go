package app_test

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// TestFailOpenSessionsOnALineAreRebuiltIntoTheLinesCounters (open finding B,
// docs/pools.md §5): fail-open sessions on a line, made while MySQL was
// down (one of them finished meanwhile, its ledger write failing), get
// their ledger rows from reconciliation with the line and the split each
// grant drew, as an apply's row has; so a rebuild of Redis from MySQL gives
// the line's and the shared pool's counters Redis had. Before, the rows
// had no line and no drawn_*: the rebuild left out what the sessions held
// (ud:a and the shared pool too low).
func TestFailOpenSessionsOnALineAreRebuiltIntoTheLinesCounters(t *testing.T) {
	const ttl = 200 * time.Millisecond
	s, p, _ := startBehindMySQLProxy(t, "--policy-cache-ttl", ttl.String(), "--reconcile-interval", "1h")
	rdb, _ := realRedis(t)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "failMode": "OPEN", "leakThresholdSeconds": 60})
	for _, l := range []string{"a", "b"} {
		if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+r+"/lines/"+l, map[string]any{"tier": "CORE", "weight": 1}); code != http.StatusCreated {
			t.Fatalf("put line %s: %d %v", l, code, out)
		}
	}
	apply := func(amount int) map[string]any {
		t.Helper()
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": amount,
			"businessLine": "a", "clientId": "c1"})
		if code != http.StatusOK {
			t.Fatalf("apply %d on line a: %d %v", amount, code, out)
		}
		return out
	}
	apply(1) // the policy and its lines cached, the balance and pools seeded

	p.Suspend()
	// The cached answers expire on the server's clock: nothing to poll.
	time.Sleep(2 * ttl)
	var ids []any
	for _, n := range []int{200, 150, 120} { // past the line's dedicated part: the shared pool too
		out := apply(n)
		if out["failOpen"] != true {
			t.Fatalf("apply with MySQL down: %v, want failOpen", out)
		}
		ids = append(ids, out["sessionId"])
	}
	// One finishes while MySQL is down: Redis settles it (its split becomes
	// what it stays charged to), the ledger write fails.
	if code, out, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": ids[1],
		"clientId": "c1", "actualUsedAmount": 30}); code == http.StatusOK {
		t.Fatalf("finish with MySQL down: %d %v, want it unrecorded", code, out)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	testenv.Eventually(t, 20*time.Second, "reconciliation records the fail-open sessions", func() bool {
		code, out, _ := call(t, s, http.MethodPost, "/admin/reconcile?resourceName="+r, nil)
		if code != http.StatusOK {
			return false
		}
		rep = out["reports"].([]any)[0].(map[string]any)
		return num(t, rep, "failOpenRecorded") == 3
	})
	before := poolCounters(t, rdb, r)
	if before["ud:a"] == 0 || before["su"] == 0 {
		t.Fatalf("pool counters %v: want the line's dedicated and the shared pool in use", before)
	}
	beforeLines, beforeShared := poolLines(t, s, r)

	dropResourceKeys(t, rdb, r)
	afterLines, afterShared := poolLines(t, s, r) // rebuilt from MySQL
	if after := poolCounters(t, rdb, r); !maps.Equal(after, before) {
		t.Errorf("pool counters rebuilt from MySQL: %v, want Redis' before the loss %v", after, before)
	}
	if !maps.Equal(afterLines, beforeLines) || afterShared != beforeShared {
		t.Errorf("status lines after the rebuild %v (shared used %d), want %v (%d)", afterLines, afterShared, beforeLines, beforeShared)
	}
	// The one finished while MySQL was down is settled in the ledger as
	// Redis settled it.
	if code, out, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": ids[1],
		"clientId": "c1", "actualUsedAmount": 30}); code != http.StatusOK || num(t, out, "chargedAmount") != 30 ||
		num(t, out, "refundedAmount") != 120 {
		t.Fatalf("finish again after the rebuild: %d %v, want the first finish answered again", code, out)
	}
}

// poolCounters reads the pool counters (ud:, us:, ub:, ug:, su, gsum) of
// the resource's only period balance in Redis.
func poolCounters(t *testing.T, rdb *redis.Client, r string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "qc:{"+r+"}:b:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("period balances of %s: %v, %v; want one", r, keys, err)
	}
	h, err := rdb.HGetAll(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for k, v := range h {
		if k == "su" || k == "gsum" || strings.HasPrefix(k, "ud:") || strings.HasPrefix(k, "us:") ||
			strings.HasPrefix(k, "ub:") || strings.HasPrefix(k, "ug:") {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s %s = %q", keys[0], k, v)
			}
			if n != 0 {
				out[k] = n
			}
		}
	}
	return out
}
