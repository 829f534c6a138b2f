package httpapi_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// poolsBackends runs fn in dev mode (miniredis, SQLite) and on the real
// Redis and MariaDB (QC_TEST_REDIS_ADDR, QC_TEST_MYSQL_DSN), each with a
// resource name of its own (res).
func poolsBackends(t *testing.T, fn func(t *testing.T, a *testAPI, res string)) {
	t.Run("dev", func(t *testing.T) {
		a, _ := newPoolsHarness(t)
		fn(t, a, "ov")
	})
	t.Run("real", func(t *testing.T) {
		rdb, sql := realPoolsStores(t)
		fn(t, startPoolsAPI(t, rdb, sql), testenv.Resource(t))
	})
}

// realPoolsStores opens the real Redis and MySQL (QC_TEST_REDIS_ADDR,
// QC_TEST_MYSQL_DSN, the schema migrated), closed when t ends.
func realPoolsStores(t *testing.T) (*redis.Client, *mysqlstore.Store) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.MustRedis(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	sql, err := mysqlstore.Open(t.Context(), testenv.MustMySQL(t), mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sql.Close() })
	if err := sql.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return rdb, sql
}

// grantAll applies n times for amount on line a as continuations and
// returns the total granted.
func grantAll(t *testing.T, a *testAPI, res string, n int, amount int64) int64 {
	t.Helper()
	var granted int64
	for i := range n {
		r := a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":%d,"clientId":"c","businessLine":"a","continuation":true,"sessionId":"s%d"}`, res, amount, i))
		if r.status == 200 {
			g, _ := strconv.ParseInt(fmt.Sprint(r.body["grantedAmount"]), 10, 64)
			granted += g
		}
	}
	return granted
}

// TestShrinkingTheBufferNeverGrantsPastTheLimit: buffer lent by an
// operator's release stayed lent when the buffer shrank under it (PUT
// …/pools with a smaller bufferPercent, or a smaller totalLimit), and a
// line was then granted the limit plus the lent buffer with no temporary
// grant: 1100 of 1000, 550 of 500, remainingQuota -100 (reviewer's
// repro). pool_layout.lua now cuts the lent buffer back and apply.lua caps
// a line's draw from the pools by the limit.
func TestShrinkingTheBufferNeverGrantsPastTheLimit(t *testing.T) {
	for _, shrink := range []struct {
		name, path, body string
		limit            int64
	}{
		{"bufferPercent 0", "/pools", `{"sharedPercent":100,"dedicatedPercent":0,"bufferPercent":0}`, 1000},
		{"limit halved", "", `{"quotaType":"TOKENS","totalLimit":500,"resetCron":"@daily"}`, 500},
	} {
		t.Run(shrink.name, func(t *testing.T) {
			poolsBackends(t, func(t *testing.T, a *testAPI, res string) {
				base := "/admin/policies/" + res
				a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":1000,"resetCron":"@daily"}`)
				a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE"}`})
				a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":100}`})
				a.mustOK(t, request{method: "PUT", path: base + shrink.path, body: shrink.body})
				if granted := grantAll(t, a, res, 40, 50); granted != shrink.limit {
					t.Fatalf("granted %d with a limit of %d and no temporary grant", granted, shrink.limit)
				}
				if rem := fmt.Sprint(a.status(t, res).body["remainingQuota"]); rem != "0" {
					t.Fatalf("remainingQuota %s after the limit was granted", rem)
				}
			})
		})
	}
}

// TestVoidingAReleaseGivesTheBufferBack: DELETE …/grants/{id} of a buffer
// release answered 200 but left the buffer lent (nothing in Redis, no
// RETURN event). It now returns what the line does not hold: the free
// buffer is whole again, and the line can draw only its other pools.
func TestVoidingAReleaseGivesTheBufferBack(t *testing.T) {
	poolsBackends(t, func(t *testing.T, a *testAPI, res string) {
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":1000,"resetCron":"@daily"}`)
		a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE"}`})
		r := a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":100,"businessLine":"a"}`})
		id := r.body["release"].(map[string]any)["id"].(string)
		free := func() string { return fmt.Sprint(a.status(t, res).body["pools"].(map[string]any)["bufferFree"]) }
		if f := free(); f != "0" {
			t.Fatalf("bufferFree %s after releasing all of it", f)
		}
		a.mustOK(t, request{method: "DELETE", path: base + "/grants/" + id})
		if f := free(); f != "100" {
			t.Fatalf("bufferFree %s after voiding the release, want 100", f)
		}
		// The journal says so too (a rebuild after Redis loss agrees).
		var returned []string
		for _, e := range a.get(t, base+"/pool-events").body["events"].([]any) {
			if e := e.(map[string]any); e["kind"] == "RETURN" {
				returned = append(returned, fmt.Sprint(e["businessLine"], " ", e["amount"]))
			}
		}
		if fmt.Sprint(returned) != "[a 100]" {
			t.Fatalf("RETURN events %v, want [a 100]", returned)
		}
		// The line draws its dedicated part and the shared pool (900); the
		// voided 100 is lent to no one, and only because grantAll's applies
		// are continuations, which put spare buffer into the shared pool
		// before they are refused (docs/pools.md §1), are they granted it
		// too: from the shared pool, never as buffer lent to a.
		if granted := grantAll(t, a, res, 40, 50); granted != 1000 {
			t.Fatalf("granted %d after the release was voided, want 1000", granted)
		}
		pl := a.status(t, res).body["pools"].(map[string]any)
		if fmt.Sprint(pl["bufferFree"], " ", pl["sharedBuffer"]) != "0 100" {
			t.Fatalf("bufferFree %v, sharedBuffer %v; want the voided 100 in the shared pool", pl["bufferFree"], pl["sharedBuffer"])
		}
		if r := a.do(t, request{method: "DELETE", path: base + "/grants/" + id}); r.status != 404 {
			t.Fatalf("second void: %d %s", r.status, r.raw)
		}
	})
}
