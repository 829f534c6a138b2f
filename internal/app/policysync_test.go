package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// A limit change, a period reset and a new business line made through one
// instance are seen by another at once (the policy bus), not after the
// policy cache TTL: the TTL here is 10 minutes, the deadline 10 seconds.
// The delays are logged (docs/operators.md quotes them).
func TestPolicyChangesReachOtherInstancesBeforeTheTTL(t *testing.T) {
	for _, m := range []testenv.Mode{testenv.Real, testenv.Cluster} {
		t.Run(string(m), func(t *testing.T) {
			a, b := twoInstances(t, m, "--policy-cache-ttl", "10m")
			res := sharedResource(t)
			putPolicy(t, a, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
			if st, _ := getStatus(t, b, res); st.limit != 1000 { // b caches the policy now
				t.Fatalf("b: limit %d", st.limit)
			}
			seen := func(what string, cond func() bool) {
				t.Helper()
				start := time.Now()
				testenv.Eventually(t, 10*time.Second, "instance b to see "+what, cond)
				t.Logf("%s: instance b saw %s after %s", m, what, time.Since(start).Round(time.Millisecond))
			}

			code, out, _ := call(t, a, http.MethodPatch, "/admin/policies/"+res+"?reason=more", `{"totalLimit":5000}`)
			if code != http.StatusOK {
				t.Fatalf("patch: %d %v", code, out)
			}
			seen("the new limit", func() bool { st, _ := getStatus(t, b, res); return st.limit == 5000 })

			_, before := getStatus(t, b, res)
			time.Sleep(5 * time.Millisecond) // a reset at a later millisecond than the period start
			code, out, _ = call(t, a, http.MethodPost, "/admin/policies/"+res+"/reset", map[string]any{"reason": "new budget"})
			if code != http.StatusOK {
				t.Fatalf("reset: %d %v", code, out)
			}
			seen("the new period", func() bool { _, o := getStatus(t, b, res); return o["periodStart"] != before["periodStart"] })
			// b charges the new period: what it grants now shows as used there.
			code, out, _ = call(t, b, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 10})
			if code != http.StatusOK {
				t.Fatalf("apply on b: %d %v", code, out)
			}
			if st, _ := getStatus(t, a, res); st.reserved != 10 {
				t.Errorf("a after b's apply: %+v; want its grant reserved in the new period", st)
			}

			code, out, _ = call(t, a, http.MethodPut, "/admin/policies/"+res+"/lines/search", map[string]any{"tier": "CORE", "weight": 1})
			if code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("put line: %d %v", code, out)
			}
			seen("the new business line", func() bool {
				code, _, _ := call(t, b, http.MethodPost, "/quota/apply",
					map[string]any{"resourceName": res, "applyAmount": 1, "businessLine": "search"})
				return code == http.StatusOK
			})
		})
	}
}
