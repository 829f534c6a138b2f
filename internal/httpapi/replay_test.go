package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/redisstore"
)

// A repeated apply whose session Redis no longer holds (past
// QC_FINISHED_RETENTION, or lost) is answered from the ledger: the first
// grant and the current remaining, never a second reservation, a 429, or a
// CANCELLED status afterwards.
func TestRepeatedApplyAfterRedisForgotTheSessionIsAnsweredFromTheLedger(t *testing.T) {
	rdb := newMiniredis(t)
	sql := newSQLite(t)
	api := startAPI(t, stores{balances: redisstore.New(rdb), ledger: sql, policies: sql}, zap.NewNop())
	const res = "replay-ledger"
	api.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100}`)
	forget := func(id string) {
		t.Helper()
		if err := rdb.Del(context.Background(), "qc:{"+res+"}:s:"+id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(id string, amount string) reply {
		return api.post(t, "/quota/apply", obj(kv("resourceName", str(res)), kv("sessionId", str(id)), kv("applyAmount", amount)))
	}
	used := func() (int64, int64) {
		st := api.status(t, res)
		return num(t, st, "usedAmount"), num(t, st, "reservedAmount")
	}

	// r1 takes 60 of 100 and uses it all; then Redis forgets it.
	if r := apply("r1", "60"); r.status != http.StatusOK || num(t, r, "grantedAmount") != 60 {
		t.Fatalf("first apply: %d %s", r.status, r.raw)
	}
	api.mustOK(t, request{method: http.MethodPost, path: "/quota/finish", body: obj(kv("resourceName", str(res)), kv("sessionId", str("r1")), kv("actualUsedAmount", "60"))})
	forget("r1")

	// Another 60 would not fit: a new apply would be refused, a repeat is not.
	r := apply("r1", "60")
	if r.status != http.StatusOK || num(t, r, "grantedAmount") != 60 || num(t, r, "remainingQuota") != 40 {
		t.Fatalf("repeat when the amount no longer fits: %d %s, want 200, granted 60, remaining 40", r.status, r.raw)
	}
	if u, rs := used(); u != 60 || rs != 0 {
		t.Fatalf("after the repeat: used %d reserved %d, want 60 and 0", u, rs)
	}

	// r2 fits again: the repeat must not reserve, and answers the current
	// remaining (100 − 60 − 5 = 35).
	apply("r2", "10")
	api.mustOK(t, request{method: http.MethodPost, path: "/quota/finish", body: obj(kv("resourceName", str(res)), kv("sessionId", str("r2")), kv("actualUsedAmount", "5"))})
	forget("r2")
	r = apply("r2", "10")
	if r.status != http.StatusOK || num(t, r, "grantedAmount") != 10 || num(t, r, "remainingQuota") != 35 {
		t.Fatalf("repeat when the amount fits: %d %s, want 200, granted 10, remaining 35", r.status, r.raw)
	}
	if u, rs := used(); u != 65 || rs != 0 {
		t.Fatalf("after the second repeat: used %d reserved %d, want 65 and 0", u, rs)
	}

	// The session is FINISHED, as the ledger says; no CANCELLED leaks out.
	hb := api.post(t, "/quota/heartbeat", obj(kv("resourceName", str(res)), kv("sessionId", str("r2"))))
	if hb.status != http.StatusConflict || hb.body["status"] != "FINISHED" {
		t.Fatalf("heartbeat of the finished session: %d %s, want 409 with status FINISHED", hb.status, hb.raw)
	}

	// Other arguments under a ledger-known id are a conflict, not a grant.
	if r := apply("r1", "7"); r.status != http.StatusConflict {
		t.Fatalf("repeat with another amount: %d %s, want 409", r.status, r.raw)
	}
	if u, rs := used(); u != 65 || rs != 0 {
		t.Fatalf("at the end: used %d reserved %d, want 65 and 0", u, rs)
	}
}
