package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testcluster"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Session ids scoped to client and resource (issue 11 §3.5,
// internal/quota scope.go), end to end.

const (
	scopeKeyA = "scope-key-client-a-0123456789"
	scopeKeyB = "scope-key-client-b-0123456789"
	scopeKeyC = "scope-key-client-c-0123456789"
)

// scopeKeys are three API keys of clients a, b and c, for every resource.
var scopeKeys = []string{"--api-keys",
	scopeKeyA + "=client-a:*;" + scopeKeyB + "=client-b:*;" + scopeKeyC + "=client-c:*"}

// as POSTs body with an API key.
func as(t *testing.T, s *testenv.Server, key, path string, body map[string]any) (int, map[string]any) {
	t.Helper()
	return send(t, s, http.MethodPost, path, body, "X-API-Key", key)
}

// statusAs reads resource's status with client a's API key.
func statusAs(t *testing.T, s *testenv.Server, resource string) (status, map[string]any) {
	t.Helper()
	code, out := send(t, s, http.MethodGet, "/quota/status?resourceName="+resource, nil, "X-API-Key", scopeKeyA)
	wantStatus(t, "status", code, out, http.StatusOK)
	return statusOf(t, out), out
}

// wantStatus fails the test unless code is want.
func wantStatus(t *testing.T, what string, code int, out map[string]any, want int) {
	t.Helper()
	if code != want {
		t.Fatalf("%s: %d %v, want %d", what, code, out, want)
	}
}

// dropKeys deletes every Redis key of resource on the mode's Redis (what a
// restart without persistence does to it). Dev mode's is in the server's
// process: it fails the test.
func dropKeys(t *testing.T, mode testenv.Mode, resource string) {
	t.Helper()
	switch mode {
	case testenv.Real:
		dropResourceKeys(t, redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()}), resource)
	case testenv.Cluster:
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testcluster.Addrs()})
		defer rdb.Close()
		keys, err := testcluster.ScanKeys(context.Background(), rdb, "qc:{"+resource+"}:*")
		if err == nil && len(keys) > 0 {
			err = rdb.Del(context.Background(), keys...).Err() // one slot: one node
		}
		if err != nil || len(keys) == 0 {
			t.Fatalf("drop %s's cluster keys: %d keys, %v", resource, len(keys), err)
		}
	default:
		t.Fatalf("no Redis to drop keys from in mode %s", mode)
	}
}

// Client b applying with client a's session id gets a session of its own
// (200, the same answer as for a fresh id: nothing about a's), both
// heartbeat and finish independently and are charged what each used; a
// retry of either is a replay, also after Redis lost everything and was
// rebuilt from the ledger; a third client's heartbeat and finish of the id
// are "not found". Before the fix b's apply was 409 SESSION_CONFLICT.
func TestAnotherClientsSessionIDIsItsOwnSession(t *testing.T) {
	forModesWith(t, scopeKeys, func(t *testing.T, s *testenv.Server) {
		r := testenv.Resource(t)
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
		applyA := map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "shared"}
		applyB := map[string]any{"resourceName": r, "applyAmount": 40, "sessionId": "shared"}
		code, a := as(t, s, scopeKeyA, "/quota/apply", applyA)
		wantStatus(t, "a's apply", code, a, http.StatusOK)
		code, b := as(t, s, scopeKeyB, "/quota/apply", applyB)
		wantStatus(t, "b's apply of a's id", code, b, http.StatusOK)
		if b["sessionId"] != "shared" || num(t, b, "grantedAmount") != 40 || num(t, b, "remainingQuota") != 860 || len(b) != len(a) {
			t.Fatalf("b's apply answered %v (a's: %v), want its own grant of 40 with the same fields", b, a)
		}
		code, c := as(t, s, scopeKeyC, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 1, "sessionId": "fresh"})
		wantStatus(t, "c's apply of a fresh id", code, c, http.StatusOK)
		if len(c) != len(b) {
			t.Fatalf("an apply of a fresh id answers %v, one of a taken id %v: the fields tell them apart", c, b)
		}
		as(t, s, scopeKeyC, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "fresh", "actualUsedAmount": 0})

		replay := func(what, key string, body, first map[string]any) {
			t.Helper()
			code, out := as(t, s, key, "/quota/apply", body)
			wantStatus(t, what, code, out, http.StatusOK)
			if out["grantedAmount"] != first["grantedAmount"] || out["leaseExpiresAt"] != first["leaseExpiresAt"] {
				t.Fatalf("%s answered %v, first answer %v", what, out, first)
			}
		}
		replay("a's retry", scopeKeyA, applyA, a)
		replay("b's retry", scopeKeyB, applyB, b)
		code, out := as(t, s, scopeKeyB, "/quota/apply", applyA)
		wantStatus(t, "b's retry with a's amount (its own session, other arguments)", code, out, http.StatusConflict)

		code, out = as(t, s, scopeKeyC, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "shared"})
		wantStatus(t, "c's heartbeat of the id", code, out, http.StatusNotFound)
		code, out = as(t, s, scopeKeyC, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "shared", "actualUsedAmount": 0})
		wantStatus(t, "c's finish of the id", code, out, http.StatusNotFound)
		for _, key := range []string{scopeKeyA, scopeKeyB} {
			code, out := as(t, s, key, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "shared"})
			wantStatus(t, "heartbeat", code, out, http.StatusOK)
		}
		if st, _ := statusAs(t, s, r); st.reserved != 140 || st.active != 2 || st.used != 0 {
			t.Fatalf("status with both sessions: %+v", st)
		}

		if s.Mode != testenv.Dev {
			// Redis loses everything; the retries are replays of the
			// sessions brought back from the ledger, not new grants.
			dropKeys(t, s.Mode, r)
			for _, c := range []struct {
				key     string
				body    map[string]any
				granted int64
			}{{scopeKeyB, applyB, 40}, {scopeKeyA, applyA, 100}} {
				code, out := as(t, s, c.key, "/quota/apply", c.body)
				if code != http.StatusOK || num(t, out, "grantedAmount") != c.granted {
					t.Fatalf("retry after the rebuild: %d %v, want a replay of %d", code, out, c.granted)
				}
			}
			if st, _ := statusAs(t, s, r); st.reserved != 140 || st.active != 2 {
				t.Fatalf("status after the rebuild and the retries: %+v, want the two sessions only", st)
			}
		}

		// The operators see both sessions under the public id, with their
		// clients; a forced finish names one by client and resource.
		code, list, _ := call(t, s, http.MethodGet, "/admin/sessions?resourceName="+r+"&status=USING", nil)
		wantStatus(t, "the session map", code, list, http.StatusOK)
		seen := map[string]bool{}
		for _, x := range list["sessions"].([]any) {
			m := x.(map[string]any)
			seen[m["sessionId"].(string)+"/"+m["clientId"].(string)] = true
		}
		if len(seen) != 2 || !seen["shared/client-a"] || !seen["shared/client-b"] {
			t.Fatalf("the session map lists %v, want shared of client-a and of client-b", list["sessions"])
		}

		code, fa := as(t, s, scopeKeyA, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "shared", "actualUsedAmount": 70})
		wantStatus(t, "a's finish", code, fa, http.StatusOK)
		code, fb, _ := call(t, s, http.MethodPost, "/admin/sessions/shared/finish",
			map[string]any{"resourceName": r, "clientId": "client-b", "amount": 10, "reason": "scope test"})
		wantStatus(t, "the forced finish of b's session", code, fb, http.StatusOK)
		if fb["clientId"] != "client-b" || fb["sessionId"] != "shared" {
			t.Fatalf("forced finish %v, want b's session", fb)
		}
		if num(t, fa, "grantedAmount") != 100 || num(t, fa, "refundedAmount") != 30 || fa["sessionId"] != "shared" ||
			num(t, fb, "grantedAmount") != 40 || num(t, fb, "refundedAmount") != 30 || fb["sessionId"] != "shared" {
			t.Fatalf("finishes: a %v, b %v", fa, fb)
		}
		code, again := as(t, s, scopeKeyB, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "shared", "actualUsedAmount": 10})
		if code != http.StatusOK || num(t, again, "chargedAmount") != 10 {
			t.Fatalf("b's repeated finish: %d %v", code, again)
		}
		st, _ := statusAs(t, s, r)
		charged, reserved, rows := ledgerSums(t, s, r)
		if st.used != 80 || st.reserved != 0 || charged != 80 || reserved != 0 || rows != 3 {
			t.Fatalf("status %+v, ledger charged %d reserved %d rows %d; want 80 charged over a's, b's and c's rows", st, charged, reserved, rows)
		}
		var clients []string
		if err := s.Ledger.Select(&clients, "SELECT client_id FROM quota_usage WHERE resource_name = ? AND charged_amount > 0 ORDER BY charged_amount", r); err != nil ||
			len(clients) != 2 || clients[0] != "client-b" || clients[1] != "client-a" {
			t.Fatalf("ledger clients %v, %v; want client-b's 10 and client-a's 70", clients, err)
		}
	})
}

// Without API keys the scope is the clientId the caller gives: two callers
// with one id get a session each; a heartbeat or finish naming its clientId
// reaches its own, one naming another client is "not found", and one naming
// none reaches the session under the bare id (the first one's), as every
// caller that sends no clientId did before.
func TestWithoutAPIKeysTheGivenClientIDScopesTheSession(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		r := testenv.Resource(t)
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
		post := func(path string, body map[string]any) (int, map[string]any) {
			code, out, _ := call(t, s, http.MethodPost, path, body)
			return code, out
		}
		for _, c := range []struct {
			client string
			amount int64
		}{{"svc-x", 100}, {"svc-y", 40}} {
			code, out := post("/quota/apply", map[string]any{"resourceName": r, "applyAmount": c.amount, "sessionId": "s", "clientId": c.client})
			if code != http.StatusOK || num(t, out, "grantedAmount") != c.amount {
				t.Fatalf("%s's apply: %d %v", c.client, code, out)
			}
		}
		code, out := post("/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "s", "clientId": "svc-y"})
		wantStatus(t, "svc-y's heartbeat", code, out, http.StatusOK)
		code, out = post("/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "s", "clientId": "svc-z"})
		wantStatus(t, "svc-z's heartbeat", code, out, http.StatusNotFound)
		code, out = post("/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "s"})
		wantStatus(t, "a heartbeat without a clientId", code, out, http.StatusOK)
		code, out = post("/quota/finish", map[string]any{"resourceName": r, "sessionId": "s", "clientId": "svc-y", "actualUsedAmount": 10})
		if code != http.StatusOK || num(t, out, "grantedAmount") != 40 {
			t.Fatalf("svc-y's finish: %d %v, want its grant of 40", code, out)
		}
		code, out = post("/quota/finish", map[string]any{"resourceName": r, "sessionId": "s", "actualUsedAmount": 70})
		if code != http.StatusOK || num(t, out, "grantedAmount") != 100 {
			t.Fatalf("a finish without a clientId: %d %v, want svc-x's grant of 100", code, out)
		}
		code, out = post("/quota/finish", map[string]any{"resourceName": r, "sessionId": "s", "clientId": "bad client", "actualUsedAmount": 1})
		wantStatus(t, "a finish with an invalid clientId", code, out, http.StatusBadRequest)
		if st, _ := getStatus(t, s, r); st.used != 80 || st.reserved != 0 {
			t.Fatalf("status %+v, want 80 used", st)
		}
	})
}

// A rolling upgrade: an instance of the old single namespace
// (--global-session-ids) beside one scoping ids, on the same Redis and
// ledger. Sessions the old one made (bare ids, as every existing row and
// Redis session) heartbeat, finish, leak and are trued up through the new
// one; on the new one another client's id is its own session, where the
// old one answers 409 as before; reconciliation finds nothing to repair.
func TestSessionsOfTheSingleNamespaceKeepWorkingAfterTheUpgrade(t *testing.T) {
	for _, mode := range []testenv.Mode{testenv.Real, testenv.Cluster} {
		t.Run(string(mode), func(t *testing.T) {
			redisArgs := testenv.RedisArgs(t, mode)
			dsn := testenv.MustMySQL(t)
			token := "scope-upgrade-" + testenv.RandomSuffix() + testenv.RandomSuffix()
			old := startOn(t, mode, redisArgs, dsn, token, append([]string{"--global-session-ids"}, scopeKeys...)...)
			cur := startOn(t, mode, redisArgs, dsn, token, scopeKeys...)
			r, leaky := sharedResource(t), sharedResource(t)
			putPolicy(t, old, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
			putPolicy(t, old, leaky, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "leakThresholdSeconds": 1})

			code, out := as(t, old, scopeKeyA, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "legacy"})
			wantStatus(t, "a's apply on the old instance", code, out, http.StatusOK)
			code, out = as(t, old, scopeKeyB, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 40, "sessionId": "legacy"})
			wantStatus(t, "b's apply of a's id on the old instance", code, out, http.StatusConflict)
			code, out = as(t, old, scopeKeyA, "/quota/apply", map[string]any{"resourceName": leaky, "applyAmount": 50, "sessionId": "legacy-leak"})
			wantStatus(t, "a's apply of a session left to leak", code, out, http.StatusOK)

			code, out = as(t, cur, scopeKeyA, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "legacy"})
			wantStatus(t, "a's heartbeat of its old session on the new instance", code, out, http.StatusOK)
			code, out = as(t, cur, scopeKeyB, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 40, "sessionId": "legacy"})
			if code != http.StatusOK || num(t, out, "grantedAmount") != 40 {
				t.Fatalf("b's apply of a's id on the new instance: %d %v, want its own grant", code, out)
			}
			code, out = as(t, cur, scopeKeyC, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "legacy"})
			wantStatus(t, "c's heartbeat of the id", code, out, http.StatusNotFound)
			code, out = as(t, cur, scopeKeyA, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "legacy"})
			wantStatus(t, "a's retry of its old apply on the new instance (a replay)", code, out, http.StatusOK)

			// The old session leaks (either instance's sweeper), and its
			// late finish on the new instance trues it up.
			testenv.Eventually(t, 30*time.Second, "the old session swept", func() bool { return leakedRows(t, cur, leaky) == 1 })
			code, out = as(t, cur, scopeKeyA, "/quota/finish", map[string]any{"resourceName": leaky, "sessionId": "legacy-leak", "actualUsedAmount": 20})
			if code != http.StatusOK || num(t, out, "chargedAmount") != 20 {
				t.Fatalf("late finish of the old leaked session: %d %v", code, out)
			}

			code, out = as(t, cur, scopeKeyA, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "legacy", "actualUsedAmount": 60})
			if code != http.StatusOK || num(t, out, "grantedAmount") != 100 {
				t.Fatalf("a's finish of its old session: %d %v", code, out)
			}
			code, out = as(t, cur, scopeKeyB, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "legacy", "actualUsedAmount": 40})
			if code != http.StatusOK || num(t, out, "grantedAmount") != 40 {
				t.Fatalf("b's finish: %d %v", code, out)
			}
			for _, res := range []string{r, leaky} {
				code, out, _ = call(t, cur, http.MethodPost, "/admin/reconcile?resourceName="+res, nil)
				wantStatus(t, "reconcile", code, out, http.StatusOK)
			}
			for _, c := range []struct {
				res  string
				used int64
			}{{r, 100}, {leaky, 20}} {
				st, _ := statusAs(t, cur, c.res)
				charged, reserved, _ := ledgerSums(t, cur, c.res)
				if st.used != c.used || st.reserved != 0 || charged != c.used || reserved != 0 {
					t.Fatalf("%s: status %+v, ledger charged %d reserved %d; want %d used", c.res, st, charged, reserved, c.used)
				}
			}
		})
	}
}

// leakedRows counts resource's LEAKED rows in s's ledger.
func leakedRows(t *testing.T, s *testenv.Server, resource string) int {
	t.Helper()
	var n int
	if err := s.Ledger.Get(&n, "SELECT COUNT(*) FROM quota_usage WHERE resource_name = ? AND status = 'LEAKED'", resource); err != nil {
		t.Fatal(err)
	}
	return n
}

// Unsetting QC_GLOBAL_SESSION_IDS is a rolling restart too: for a while an
// instance still in the single namespace serves beside ones that scope ids.
// A session one of those stored under its scoped id (client b applying with
// client a's id) must heartbeat and finish through the other: the flag only
// stops making scoped ids, it does not forget them. Before the fix b's
// heartbeat and finish there were 404 SESSION_NOT_FOUND (its session then
// leaked, and its grant stayed charged until the late finish).
func TestScopedSessionsKeepWorkingThroughAGlobalIDsInstance(t *testing.T) {
	mode := testenv.Real
	redisArgs := testenv.RedisArgs(t, mode)
	dsn := testenv.MustMySQL(t)
	token := "scope-downgrade-" + testenv.RandomSuffix() + testenv.RandomSuffix()
	global := startOn(t, mode, redisArgs, dsn, token, append([]string{"--global-session-ids"}, scopeKeys...)...)
	cur := startOn(t, mode, redisArgs, dsn, token, scopeKeys...)
	r := sharedResource(t)
	putPolicy(t, cur, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})

	code, out := as(t, cur, scopeKeyA, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "both"})
	wantStatus(t, "a's apply", code, out, http.StatusOK)
	code, out = as(t, cur, scopeKeyB, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 40, "sessionId": "both"})
	wantStatus(t, "b's apply of a's id (scoped)", code, out, http.StatusOK)

	code, out = as(t, global, scopeKeyB, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "both"})
	wantStatus(t, "b's heartbeat through the global-ids instance", code, out, http.StatusOK)
	code, out = as(t, global, scopeKeyC, "/quota/heartbeat", map[string]any{"resourceName": r, "sessionId": "both"})
	wantStatus(t, "c's heartbeat of the id through the global-ids instance", code, out, http.StatusNotFound)
	code, out = as(t, global, scopeKeyB, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "both", "actualUsedAmount": 10})
	if code != http.StatusOK || num(t, out, "grantedAmount") != 40 || out["sessionId"] != "both" {
		t.Fatalf("b's finish through the global-ids instance: %d %v, want its grant of 40", code, out)
	}
	code, out = as(t, global, scopeKeyA, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "both", "actualUsedAmount": 30})
	if code != http.StatusOK || num(t, out, "grantedAmount") != 100 {
		t.Fatalf("a's finish through the global-ids instance: %d %v", code, out)
	}
	st, _ := statusAs(t, cur, r)
	charged, reserved, _ := ledgerSums(t, cur, r)
	if st.used != 40 || st.reserved != 0 || charged != 40 || reserved != 0 {
		t.Fatalf("status %+v, ledger charged %d reserved %d; want 40 used", st, charged, reserved)
	}
}
