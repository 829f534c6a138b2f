package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

// TestConcurrentLimitCutsNeverLeaveLinesOverTheLimit: a policy's limit
// change checked the business lines as it had read them, then wrote the
// policy outside the policy row's lock that line PUTs take: a limit cut
// racing line PUTs could store a limit whose dedicated pool the stored
// lines pass. Now the check and the write take the same turn
// (PoolConfig.UpdatePolicyLocked). Each round races limit cuts (PUT and
// PATCH) with line PUTs; afterwards the stored lines fit the stored limit
// (pools.Plan with the stored settings), every loser is a 400
// INVALID_ARGUMENT naming its field (dedicated or totalLimit), and Redis'
// layout holds exactly the stored lines.
func TestConcurrentLimitCutsNeverLeaveLinesOverTheLimit(t *testing.T) {
	raceBackends(t, func(t *testing.T, as []*testAPI, res string) {
		a := as[0]
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`) // dedicated pool 30 000
		for round := range 4 {
			rqs := make([]request, raceN)
			for i := range rqs {
				limit := 20000 + 100*round + i // dedicated pool about 6 000: one line of 4 000 fits
				switch {
				case i%2 == 1:
					rqs[i] = request{method: http.MethodPut, path: fmt.Sprintf("%s/lines/l%d_%02d", base, round, i),
						body: `{"tier":"CORE","dedicated":4000}`}
				case i%4 == 0:
					rqs[i] = request{method: http.MethodPut, path: base, body: fmt.Sprintf(`{"quotaType":"TOKENS","totalLimit":%d}`, limit)}
				default:
					rqs[i] = request{method: http.MethodPatch, path: base, body: fmt.Sprintf(`{"totalLimit":%d}`, limit)}
				}
			}
			for i, r := range race(t, as, rqs) {
				msg, _ := r.body["message"].(string)
				field := "totalLimit"
				if i%2 == 1 {
					field = "dedicated"
				}
				switch {
				case r.status == http.StatusOK || r.status == http.StatusCreated:
				case r.status == http.StatusBadRequest && r.body["code"] == "INVALID_ARGUMENT" &&
					strings.HasPrefix(msg, "invalid "+field+":"):
				default:
					t.Errorf("round %d: %s %s: %d %s, want 200/201 or 400 naming %s", round, rqs[i].method, rqs[i].path, r.status, r.raw, field)
				}
			}
			limit, lines := storedLayout(t, a, res)
			if _, err := pools.Plan(limit, pools.DefaultSettings(), lines); err != nil {
				t.Fatalf("round %d: the stored lines do not fit the stored limit %d: %v (%d lines)", round, limit, err, len(lines))
			}
			if st := a.status(t, res); len(st.body["pools"].(map[string]any)["lines"].([]any)) != len(lines) {
				t.Fatalf("round %d: Redis' layout does not hold the %d stored lines: %s", round, len(lines), st.raw)
			}
			// Next round: the lines go, the limit is back.
			for _, l := range lines {
				a.mustOK(t, request{method: http.MethodDelete, path: base + "/lines/" + l.Name})
			}
			a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`)
		}
	})
}

// storedLayout reads a resource's stored limit and business lines.
func storedLayout(t *testing.T, a *testAPI, res string) (int64, []pools.LineSpec) {
	t.Helper()
	pol := a.mustOK(t, request{method: http.MethodGet, path: "/admin/policies/" + res})
	limit, err := pol.body["totalLimit"].(json.Number).Int64()
	if err != nil {
		t.Fatalf("policy: %v: %s", err, pol.raw)
	}
	r := a.mustOK(t, request{method: http.MethodGet, path: "/admin/policies/" + res + "/lines"})
	var out struct {
		Lines []pools.LineSpec `json:"lines"`
	}
	if err := json.Unmarshal(r.raw, &out); err != nil {
		t.Fatalf("lines: %v: %s", err, r.raw)
	}
	return limit, out.Lines
}
