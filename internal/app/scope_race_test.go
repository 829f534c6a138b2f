package app_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// burst sends n copies of one apply at once with key and checks they all
// answer the same grant and lease (one session, the others replays).
func burst(t *testing.T, s *testenv.Server, key string, n int, body map[string]any) map[string]any {
	t.Helper()
	outs := make([]map[string]any, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], outs[i] = send(t, s, http.MethodPost, "/quota/apply", body, "X-API-Key", key)
		}()
	}
	wg.Wait()
	var first map[string]any
	for i := range n {
		if codes[i] == http.StatusServiceUnavailable {
			continue
		}
		if codes[i] != http.StatusOK {
			t.Fatalf("apply %d of %d: %d %v", i, n, codes[i], outs[i])
		}
		if first == nil {
			first = outs[i]
		}
		if fmt.Sprint(outs[i]["grantedAmount"], outs[i]["leaseExpiresAt"]) != fmt.Sprint(first["grantedAmount"], first["leaseExpiresAt"]) {
			t.Fatalf("apply %d answered %v, another %v: two grants", i, outs[i], first)
		}
	}
	if first == nil {
		t.Fatalf("every apply was 503")
	}
	return first
}

// Sixteen concurrent retries of one apply are one session, answered with
// one grant and lease (real Redis and MariaDB): client b's with the id of
// client a's finished session, after Redis lost the resource's keys (the
// bare grants given back, the session scoped), again after a rebuild, again
// after b finished it, and on another resource. Before the fix of record's
// replay of a settled row, the retries after the finish answered two
// different leases and remaining figures (grants then given back).
func TestConcurrentRetriesOfAScopedIDAreOneSession(t *testing.T) {
	mode := testenv.Real
	s := testenv.Start(t, mode, scopeKeys...)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
	code, out := as(t, s, scopeKeyA, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "x"})
	wantStatus(t, "a's apply", code, out, http.StatusOK)
	code, out = as(t, s, scopeKeyA, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "x", "actualUsedAmount": 100})
	wantStatus(t, "a's finish", code, out, http.StatusOK)
	dropKeys(t, mode, r)
	body := map[string]any{"resourceName": r, "applyAmount": 40, "sessionId": "x"}
	burst(t, s, scopeKeyB, 16, body)
	check := func(what string, reserved, active, used int64) {
		t.Helper()
		st, _ := statusAs(t, s, r)
		if st.reserved != reserved || st.active != active || st.used != used {
			t.Fatalf("%s: status %+v", what, st)
		}
	}
	check("after b's burst", 40, 1, 100)
	dropKeys(t, mode, r)
	burst(t, s, scopeKeyB, 16, body)
	check("after the rebuild burst", 40, 1, 100)
	code, out = as(t, s, scopeKeyB, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "x", "actualUsedAmount": 40})
	wantStatus(t, "b's finish", code, out, http.StatusOK)
	dropKeys(t, mode, r)
	burst(t, s, scopeKeyB, 16, body)
	check("after the finished burst", 0, 0, 140)
	// The same client, another resource, the same id.
	r2 := testenv.Resource(t) + "-2"
	putPolicy(t, s, r2, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
	burst(t, s, scopeKeyB, 16, map[string]any{"resourceName": r2, "applyAmount": 7, "sessionId": "x"})
	st, _ := statusAs(t, s, r2)
	if st.reserved != 7 || st.active != 1 {
		t.Fatalf("r2: %+v", st)
	}
	code, out = as(t, s, scopeKeyB, "/quota/heartbeat", map[string]any{"resourceName": r2, "sessionId": "x"})
	wantStatus(t, "b's heartbeat on r2", code, out, http.StatusOK)
	code, out = as(t, s, scopeKeyB, "/quota/finish", map[string]any{"resourceName": r2, "sessionId": "x", "actualUsedAmount": 3})
	if code != http.StatusOK || num(t, out, "grantedAmount") != 7 {
		t.Fatalf("b's finish on r2: %d %v", code, out)
	}
	for _, c := range []struct {
		res           string
		charged, rows int64
	}{{r, 140, 2}, {r2, 3, 1}} {
		if charged, reserved, rows := ledgerSums(t, s, c.res); charged != c.charged || reserved != 0 || rows != c.rows {
			t.Fatalf("%s: ledger charged %d reserved %d rows %d, want %d charged in %d rows", c.res, charged, reserved, rows, c.charged, c.rows)
		}
	}
}

// Sixteen concurrent retries of a finished session's apply after Redis lost
// its resource's keys are all answered from the ledger row: one grant and
// lease, nothing left reserved (the bare id; failed before the fix too).
func TestConcurrentRetriesOfAFinishedSessionAreReplays(t *testing.T) {
	mode := testenv.Real
	s := testenv.Start(t, mode, scopeKeys...)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
	body := map[string]any{"resourceName": r, "applyAmount": 100, "sessionId": "x"}
	code, out := as(t, s, scopeKeyA, "/quota/apply", body)
	wantStatus(t, "a's apply", code, out, http.StatusOK)
	code, out = as(t, s, scopeKeyA, "/quota/finish", map[string]any{"resourceName": r, "sessionId": "x", "actualUsedAmount": 100})
	wantStatus(t, "a's finish", code, out, http.StatusOK)
	dropKeys(t, mode, r)
	first := burst(t, s, scopeKeyA, 16, body)
	if st, _ := statusAs(t, s, r); st.used != 100 || st.reserved != 0 || st.active != 0 || num(t, first, "grantedAmount") != 100 {
		t.Fatalf("status %+v after the retries answered %v, want the finished session's 100 used only", st, first)
	}
}
