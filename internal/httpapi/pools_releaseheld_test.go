package httpapi_test

import (
	"fmt"
	"testing"
)

// TestReleasesAreListedWithWhatTheirLineHolds: an apply's spare move lends
// on the buffer a line was released and does not hold (into the shared
// pool), and the listing used to show that release at its amount while the
// line held 0 of it (docs/pools.md §5, finding 6). Each release is now
// listed with held (what its line, or the shared pool, still holds of it),
// and a void answers what it returned: at most held, never another
// release's part. Limit 10,000 (buffer 1,000): 300 released to b (GROWTH),
// 200 to the shared pool; a CORE line's critical apply of what it was told
// it could get moves the spare buffer; b's release is then held 0, the
// shared pool's 200; once a's session finished, the voids return 0 and 200.
func TestReleasesAreListedWithWhatTheirLineHolds(t *testing.T) {
	poolsBackends(t, func(t *testing.T, a *testAPI, res string) {
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
		a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE"}`})
		a.mustOK(t, request{method: "PUT", path: base + "/lines/b", body: `{"tier":"GROWTH"}`})
		toB := a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":300,"businessLine":"b"}`})
		toShared := a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":200}`})
		idB := toB.body["release"].(map[string]any)["id"].(string)
		idS := toShared.body["release"].(map[string]any)["id"].(string)
		if h := toB.body["release"].(map[string]any)["held"]; fmt.Sprint(h) != "300" {
			t.Fatalf("a new release answers held %v, want 300", h)
		}
		held := func() map[string]string {
			out := map[string]string{}
			for _, g := range a.mustOK(t, request{method: "GET", path: base + "/grants"}).body["grants"].([]any) {
				m := g.(map[string]any)
				out[m["id"].(string)] = fmt.Sprint(m["amount"], " ", m["held"])
			}
			return out
		}
		if h := held(); h[idB] != "300 300" || h[idS] != "200 200" {
			t.Fatalf("before the spare move: amount, held %v", h)
		}
		one := a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":1,"clientId":"c","businessLine":"a","sessionId":"one"}`, res))
		if one.status != 200 {
			t.Fatalf("apply 1: %d %s", one.status, one.raw)
		}
		// All of what a CORE line's critical work may get, the spare buffer
		// moved (lineRemaining counts it): granted, and the move made.
		lr := fmt.Sprint(one.body["lineRemaining"])
		big := a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":%s,"clientId":"c","businessLine":"a","sessionId":"big"}`, res, lr))
		if big.status != 200 {
			t.Fatalf("apply of the %s answered: %d %s", lr, big.status, big.raw)
		}
		if pl := a.status(t, res).body["pools"].(map[string]any); fmt.Sprint(pl["sharedBuffer"]) != "1000" {
			t.Fatalf("no spare move: sharedBuffer %v", pl["sharedBuffer"])
		}
		if h := held(); h[idB] != "300 0" || h[idS] != "200 200" {
			t.Fatalf("after the spare move: amount, held %v; want b's release held 0, the shared pool's 200", h)
		}
		for _, id := range []string{"one", "big"} {
			a.mustOK(t, request{method: "POST", path: "/quota/finish", body: fmt.Sprintf(`{"resourceName":%q,"sessionId":%q,"clientId":"c","actualUsedAmount":1}`, res, id)})
		}
		for _, v := range []struct{ id, returned string }{{idB, "0"}, {idS, "200"}} {
			r := a.mustOK(t, request{method: "DELETE", path: base + "/grants/" + v.id})
			if r.body["kind"] != "RELEASE" || fmt.Sprint(r.body["returned"]) != v.returned {
				t.Fatalf("void %s: %s; want returned %s", v.id, r.raw, v.returned)
			}
		}
		if h := held(); h[idB] != "300 0" || h[idS] != "200 0" {
			t.Fatalf("after the voids: amount, held %v", h)
		}
		if pl := a.status(t, res).body["pools"].(map[string]any); fmt.Sprint(pl["sharedBuffer"]) != "800" || fmt.Sprint(pl["bufferFree"]) != "200" {
			t.Fatalf("after the voids: sharedBuffer %v, bufferFree %v; want 800, 200", pl["sharedBuffer"], pl["bufferFree"])
		}
	})
}
