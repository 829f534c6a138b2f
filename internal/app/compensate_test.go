package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestARefusedApplysLateReservationIsGivenBackWhenRedisAnswers reproduces
// the rest of issue 11 §3.1: an apply whose Redis call timed out (here the
// replies are lost on the way back; with Redis SIGSTOPped the queued script
// runs when it resumes) answered 503, but its script reserved all the same,
// with no ledger row. That reservation counted as reserved until its lease
// ran out and QC_RECONCILE_GRACE passed (10 minutes here). It must be given
// back as soon as Redis answers again, and a retry of the same apply must
// then be counted once.
func TestARefusedApplysLateReservationIsGivenBackWhenRedisAnswers(t *testing.T) {
	s, p := startBehindLossyRedis(t, "comp-")
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 600})
	if code, out := callRetry(t, s, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 1, "sessionId": "warm"}); code != http.StatusOK {
		t.Fatalf("apply: %d %v", code, out) // the balance is seeded
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })

	p.DropReplies(2 * time.Second)
	body := map[string]any{"resourceName": r, "applyAmount": 335, "sessionId": "late"}
	if code, out, _ := call(t, s, http.MethodPost, "/quota/apply", body); code != http.StatusServiceUnavailable {
		t.Fatalf("apply while Redis replies are lost: %d %v, want 503", code, out)
	}
	// Its script ran: Redis holds the session (reserved, or already given
	// back), the ledger no row.
	if n := rdb.Exists(t.Context(), "qc:{"+r+"}:s:late").Val(); n != 1 {
		t.Fatal("the refused apply's script did not run: nothing to reproduce")
	}
	var rows int
	if err := s.Ledger.QueryRow("SELECT COUNT(*) FROM quota_usage WHERE session_id = 'late'").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("ledger rows of the refused apply: %d, %v", rows, err)
	}
	testenv.Eventually(t, 15*time.Second, "the refused apply's reservation to be given back", func() bool {
		code, out, _ := call(t, s, http.MethodGet, "/quota/status?resourceName="+r, nil)
		return code == http.StatusOK && num(t, out, "reservedAmount") == 1
	})
	// The retry of the same apply starts afresh and is counted once.
	if code, out := callRetry(t, s, "/quota/apply", body); code != http.StatusOK || out["replayed"] == true {
		t.Fatalf("retry: %d %v, want a fresh grant", code, out)
	}
	if st, _ := getStatus(t, s, r); st.reserved != 336 || st.used != 0 {
		t.Fatalf("status after the retry %+v, want reserved 336 (the retry and the first session)", st)
	}
	if charged, reserved, _ := ledgerSums(t, s, r); charged != 0 || reserved != 336 {
		t.Fatalf("ledger charged %d reserved %d, want 0 and 336", charged, reserved)
	}
}

// TestARefusedPoolsApplysLateReservationIsGivenBack is the test above on a
// resource with business lines (apply.lua): the refused apply's late
// grant is given back to the balance and to the line's pools as soon as
// Redis answers, and a retry is counted once, in the pools too. Before,
// pools' applies were never compensated: the grant stayed reserved, and
// held by its line, until its lease ran out and the grace passed.
func TestARefusedPoolsApplysLateReservationIsGivenBack(t *testing.T) {
	s, p := startBehindLossyRedis(t, "pcomp-")
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 600})
	if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+r+"/lines/a", map[string]any{"tier": "CORE", "weight": 1}); code != http.StatusCreated {
		t.Fatalf("put line: %d %v", code, out)
	}
	warm := map[string]any{"resourceName": r, "applyAmount": 1, "sessionId": "warm", "businessLine": "a"}
	if code, out := callRetry(t, s, "/quota/apply", warm); code != http.StatusOK {
		t.Fatalf("apply: %d %v", code, out) // the balance and the pool counters are seeded
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })

	p.DropReplies(2 * time.Second)
	body := map[string]any{"resourceName": r, "applyAmount": 335, "sessionId": "late", "businessLine": "a"}
	if code, out, _ := call(t, s, http.MethodPost, "/quota/apply", body); code != http.StatusServiceUnavailable {
		t.Fatalf("apply while Redis replies are lost: %d %v, want 503", code, out)
	}
	if n := rdb.Exists(t.Context(), "qc:{"+r+"}:s:late").Val(); n != 1 {
		t.Fatal("the refused apply's script did not run: nothing to reproduce")
	}
	testenv.Eventually(t, 15*time.Second, "the refused apply's reservation to be given back", func() bool {
		code, out, _ := call(t, s, http.MethodGet, "/quota/status?resourceName="+r, nil)
		return code == http.StatusOK && num(t, out, "reservedAmount") == 1
	})
	if lines, shared := poolLines(t, s, r); lines["a"].used != 1 || shared != 0 {
		t.Fatalf("line a after the give-back: %+v, shared used %d; want the warm session's 1 only", lines["a"], shared)
	}
	if code, out := callRetry(t, s, "/quota/apply", body); code != http.StatusOK || out["replayed"] == true {
		t.Fatalf("retry: %d %v, want a fresh grant", code, out)
	}
	if st, _ := getStatus(t, s, r); st.reserved != 336 || st.used != 0 {
		t.Fatalf("status after the retry %+v, want reserved 336", st)
	}
	lines, _ := poolLines(t, s, r)
	if d := ledgerPools(t, s, r)["a"]; lines["a"].used != 336 || d.Dedicated+d.Shared+d.Buffer != 336 {
		t.Fatalf("line a holds %d by Redis, %+v by the ledger; want 336 in both", lines["a"].used, d)
	}
}

// startBehindLossyRedis starts a real-mode server on its own database
// (named with prefix) whose Redis is behind a proxy that can lose replies,
// with a 200 ms Redis timeout and a breaker that stays closed (so that an
// apply's script is sent while replies are lost).
func startBehindLossyRedis(t *testing.T, prefix string) (*testenv.Server, *faults.Proxy) {
	t.Helper()
	p, err := faults.StartProxy(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	s := startOn(t, testenv.Real, []string{"--redis-addr", p.Addr(), "--redis-timeout", "200ms"},
		testenv.MustMySQL(t), prefix+testenv.RandomSuffix()+testenv.RandomSuffix(),
		"--breaker-failures", "1000", "--reconcile-interval", "1h")
	return s, p
}
