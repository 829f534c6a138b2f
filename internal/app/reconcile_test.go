package app_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// reconcileNow runs POST /admin/reconcile for one resource and returns its
// report.
func reconcileNow(t *testing.T, s *testenv.Server, r string) map[string]any {
	t.Helper()
	code, out, _ := call(t, s, http.MethodPost, "/admin/reconcile?resourceName="+r, nil)
	reps, _ := out["reports"].([]any)
	if code != http.StatusOK || len(reps) != 1 {
		t.Fatalf("reconcile: %d %v", code, out)
	}
	return reps[0].(map[string]any)
}

func TestReconciliationRepairsRedisFromTheLedger(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--reconcile-grace", "1ms", "--reconcile-settle", "50ms", "--reconcile-interval", "1h")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()

	t.Run("a reservation without a ledger row is given back", func(t *testing.T) {
		r := testenv.Resource(t)
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
		_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 300})
		// The process died between the Redis reservation and the ledger row.
		if _, err := s.Ledger.Exec("DELETE FROM quota_usage WHERE session_id = ?", a["sessionId"]); err != nil {
			t.Fatal(err)
		}
		rep := reconcileNow(t, s, r)
		st, _ := getStatus(t, s, r)
		if num(t, rep, "orphansReleased") != 1 || st.reserved != 0 || st.active != 0 || st.remaining != 1000 {
			t.Fatalf("report %v, status %+v", rep, st)
		}
	})

	t.Run("a ledger row left USING is settled from Redis", func(t *testing.T) {
		r := testenv.Resource(t)
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
		_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 300})
		call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": a["sessionId"], "actualUsedAmount": 120})
		// The ledger write of the finish was lost.
		if _, err := s.Ledger.Exec("UPDATE quota_usage SET status = 'USING', charged_amount = 300 WHERE session_id = ?", a["sessionId"]); err != nil {
			t.Fatal(err)
		}
		rep := reconcileNow(t, s, r)
		charged, reserved, _ := ledgerSums(t, s, r)
		if num(t, rep, "ledgerRowsSettled") != 1 || charged != 120 || reserved != 0 {
			t.Fatalf("report %v, ledger charged %d reserved %d", rep, charged, reserved)
		}
	})

	t.Run("a session Redis lost comes back and can finish", func(t *testing.T) {
		r := testenv.Resource(t)
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
		_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 300, "sessionId": "evicted"})
		if err := rdb.Del(ctx, "qc:{"+r+"}:s:evicted").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZRem(ctx, "qc:{"+r+"}:leases", "evicted").Err(); err != nil {
			t.Fatal(err)
		}
		rep := reconcileNow(t, s, r)
		code, f, _ := call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": a["sessionId"], "actualUsedAmount": 100})
		st, _ := getStatus(t, s, r)
		if num(t, rep, "sessionsRestored") != 1 || code != http.StatusOK || st.used != 100 || st.reserved != 0 {
			t.Fatalf("report %v, finish %d %v, status %+v", rep, code, f, st)
		}
	})

	t.Run("a stable balance drift is corrected by delta", func(t *testing.T) {
		r := testenv.Resource(t)
		putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
		_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": r, "applyAmount": 300})
		call(t, s, http.MethodPost, "/quota/finish", map[string]any{"resourceName": r, "sessionId": a["sessionId"], "actualUsedAmount": 200})
		keys, _ := rdb.Keys(ctx, "qc:{"+r+"}:b:*").Result()
		if len(keys) != 1 {
			t.Fatalf("balance keys %v", keys)
		}
		rdb.HIncrBy(ctx, keys[0], "charged", 77)
		rdb.HIncrBy(ctx, keys[0], "reserved", -5)
		rep := reconcileNow(t, s, r)
		st, _ := getStatus(t, s, r)
		if num(t, rep, "driftCharged") != 77 || num(t, rep, "driftReserved") != -5 || rep["balanceAdjusted"] != true ||
			st.used != 200 || st.reserved != 0 {
			t.Fatalf("report %v, status %+v", rep, st)
		}
		if rep2 := reconcileNow(t, s, r); num(t, rep2, "driftCharged") != 0 || num(t, rep2, "driftReserved") != 0 {
			t.Fatalf("drift left after repair: %v", rep2)
		}
	})
}

func TestReconciliationSetsRedisLimitToThePolicys(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--reconcile-interval", "1h")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "COUNT", "totalLimit": 137})
	// Two concurrent PUTs finished their Redis writes in the other order.
	if err := rdb.Set(context.Background(), "qc:{"+r+"}:limit", "138", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rep := reconcileNow(t, s, r)
	st, _ := getStatus(t, s, r)
	if rep["limitSynced"] != true || st.limit != 137 {
		t.Fatalf("report %v, status limit %d; want the policy's 137", rep, st.limit)
	}
}

// TestReproSkippedReconcileAnsweredAsASuccess reproduces issue 11 §3.4:
// while another pass holds a resource's reconcile lock (the periodic pass of
// this instance, or another instance), POST /admin/reconcile did nothing
// and still answered 200 SUCCESS with zero drift and a zero periodStart, so
// a caller that waits for a clean pass (the fault test's settling) took it
// for one and compared status with the ledger while the other pass was
// still repairing. Now it answers 409 RECONCILE_SKIPPED with Retry-After,
// the report says why, and periodStart is null; once the lock is free the
// same call answers 200.
func TestReproSkippedReconcileAnsweredAsASuccess(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--reconcile-interval", "1h")
	_, store := realRedis(t)
	ctx := context.Background()
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})

	token, err := store.TryLock(ctx, r, "reconcile", time.Minute) // another instance's pass
	if err != nil || token == "" {
		t.Fatalf("TryLock = %q, %v", token, err)
	}
	code, out, hdr := call(t, s, http.MethodPost, "/admin/reconcile?resourceName="+r, nil)
	reps, _ := out["reports"].([]any)
	if code != http.StatusConflict || out["code"] != "RECONCILE_SKIPPED" || hdr.Get("Retry-After") == "" || len(reps) != 1 {
		t.Fatalf("reconcile while the lock is held: %d %v (Retry-After %q)", code, out, hdr.Get("Retry-After"))
	}
	rep := reps[0].(map[string]any)
	if rep["skipped"] == nil || rep["skipped"] == "" || rep["periodStart"] != nil {
		t.Fatalf("skipped report %v: want a reason and a null periodStart", rep)
	}
	if err := store.Unlock(ctx, r, "reconcile", token); err != nil {
		t.Fatal(err)
	}
	rep = reconcileNow(t, s, r)
	if rep["skipped"] != nil || rep["periodStart"] == nil {
		t.Fatalf("reconcile with the lock free: %v", rep)
	}
}

// TestReconcileRefusesWhatItWouldIgnore: POST /admin/reconcile reads one
// optional resourceName and no body. A repeated or empty resourceName, or a
// body, is 400 and runs nothing (no audit record); before, they ran a pass
// for the first name, or for every resource.
func TestReconcileRefusesWhatItWouldIgnore(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
	_, before, _ := call(t, s, http.MethodGet, "/admin/audit?limit=1", nil)
	for _, tc := range []struct{ name, query, body string }{
		{"a repeated resourceName", "?resourceName=" + r + "&resourceName=" + r, ""},
		{"an empty resourceName", "?resourceName=", ""},
		{"a JSON body", "", `{"resourceName":"` + r + `"}`},
	} {
		code, out, _ := call(t, s, http.MethodPost, "/admin/reconcile"+tc.query, tc.body)
		wantCode(t, tc.name, code, out, http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	if _, after, _ := call(t, s, http.MethodGet, "/admin/audit?limit=1", nil); !reflect.DeepEqual(before, after) {
		t.Fatalf("a refused reconcile was audited: %v → %v", before, after)
	}
	if code, out, _ := call(t, s, http.MethodPost, "/admin/reconcile?resourceName="+r, nil); code != http.StatusOK {
		t.Fatalf("reconcile: %d %v", code, out)
	}
}
