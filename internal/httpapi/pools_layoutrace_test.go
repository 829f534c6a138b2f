package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestConcurrentLimitChangesLeaveRedisTheStoredLayout: limit changes (PUT
// and PATCH, sent to two instances on MariaDB) racing each other and line
// PUTs each wrote Redis' limit and layout after their commit, from a read
// that a later change could overtake: Redis could end with an older
// change's limit or layout. Now each writer checks, after its write, that
// what it wrote is still what the policy store holds and writes again when
// not (quota.Service.relayoutAfterPut), so once every request is answered
// Redis' limit, pools and lines' dedicated parts equal the stored ones
// (GET …/lines, cut from the ledger), in every round.
func TestConcurrentLimitChangesLeaveRedisTheStoredLayout(t *testing.T) {
	raceBackends(t, func(t *testing.T, as []*testAPI, res string) {
		a := as[0]
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`)
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/a", body: `{"tier":"CORE","weight":3}`})
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/b", body: `{"tier":"GROWTH","weight":1}`})
		for round := range 6 {
			rqs := make([]request, raceN)
			for i := range rqs {
				limit := 50000 + 1000*i + 7*round
				switch {
				case i%4 == 3:
					rqs[i] = request{method: http.MethodPut, path: fmt.Sprintf("%s/lines/c%d", base, i),
						body: fmt.Sprintf(`{"tier":"EXPLORE","weight":%d}`, 1+round)}
				case i%2 == 0:
					rqs[i] = request{method: http.MethodPut, path: base, body: fmt.Sprintf(`{"quotaType":"TOKENS","totalLimit":%d}`, limit)}
				default:
					rqs[i] = request{method: http.MethodPatch, path: base, body: fmt.Sprintf(`{"totalLimit":%d}`, limit)}
				}
			}
			for i, r := range race(t, as, rqs) {
				if r.status != http.StatusOK && r.status != http.StatusCreated {
					t.Fatalf("round %d: %s %s: %d %s", round, rqs[i].method, rqs[i].path, r.status, r.raw)
				}
			}
			ledger := a.mustOK(t, request{method: http.MethodGet, path: base + "/lines"})
			pol := a.mustOK(t, request{method: http.MethodGet, path: base})
			st := a.status(t, res)
			p := st.body["pools"].(map[string]any)
			if got, want := fmt.Sprint(st.body["totalLimit"]), fmt.Sprint(pol.body["totalLimit"]); got != want {
				t.Fatalf("round %d: Redis' limit %s, the stored one %s", round, got, want)
			}
			for _, k := range []string{"shared", "buffer"} {
				if got, want := fmt.Sprint(p[k]), fmt.Sprint(ledger.body[k]); got != want {
					t.Fatalf("round %d: Redis' %s %s, the stored layout's %s:\n%s\n%s", round, k, got, want, st.raw, ledger.raw)
				}
			}
			want := map[string]string{}
			for _, l := range ledger.body["lines"].([]any) {
				m := l.(map[string]any)
				want[fmt.Sprint(m["businessLine"])] = fmt.Sprint(m["dedicated"])
			}
			lines := p["lines"].([]any)
			if len(lines) != len(want) {
				t.Fatalf("round %d: Redis has %d lines, the ledger %d:\n%s\n%s", round, len(lines), len(want), st.raw, ledger.raw)
			}
			for _, l := range lines {
				m := l.(map[string]any)
				if got := fmt.Sprint(m["dedicated"]); got != want[fmt.Sprint(m["businessLine"])] {
					t.Fatalf("round %d: line %v holds %s in Redis, %s in the stored layout:\n%s\n%s",
						round, m["businessLine"], got, want[fmt.Sprint(m["businessLine"])], st.raw, ledger.raw)
				}
			}
		}
	})
}
