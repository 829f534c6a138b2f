package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// A 429 on a business line because the resource itself is used up (an
// overage finished on core took the limit; the lines' pools would still
// cover the apply) gives reason EXHAUSTED, lineRemaining and advice that
// fits the tier, as the line-level refusals do (docs/pools.md §5, finding
// E): before, its body had no reason and the bare "quota exhausted: N
// remaining" message. Dev mode and real Redis + MariaDB.
func TestAResourceLevelRefusalOnALineGivesItsReason(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		set := client.DefaultPoolSettings()
		set.Elasticity = "OFF"
		if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 1000, Pools: &set}); err != nil {
			t.Fatal(err)
		}
		for line, body := range map[string]map[string]any{"core": {"tier": "CORE", "weight": 2}, "explore": {"tier": "EXPLORE", "weight": 1}} {
			if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+res+"/lines/"+line, body); code != http.StatusCreated {
				t.Fatalf("put line %s: %d %v", line, code, out)
			}
		}
		first, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 10, BusinessLine: "core"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: first.SessionID, ActualUsedAmount: 1000}); err != nil {
			t.Fatal(err)
		}
		for _, l := range []struct{ line, tier, advice string }{
			{"core", "CORE", "even a CORE line's critical work and continuations are refused"},
			{"explore", "EXPLORE", "no tier or kind of work passes"},
		} {
			code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 5,
				"businessLine": l.line, "clientId": "svc"})
			st, err := c.Status(ctxOf(t), res)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := out["message"].(string)
			if code != http.StatusTooManyRequests || out["reason"] != "EXHAUSTED" || num(t, out, "lineRemaining") != 0 ||
				num(t, out, "remainingQuota") != st.RemainingQuota ||
				!strings.Contains(msg, `business line "`+l.line+`"`) || !strings.Contains(msg, "the resource itself is used up") ||
				!strings.Contains(msg, l.advice) || !strings.Contains(msg, "the line could be granted 0 now") {
				t.Fatalf("%s (%s) after the limit was used up: %d %v", l.line, l.tier, code, out)
			}
		}
		// A plain resource's 429 stays as it was: no lines, no reason.
		plain := testenv.Resource(t)
		if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: plain, QuotaType: "TOKENS", TotalLimit: 10}); err != nil {
			t.Fatal(err)
		}
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": plain, "applyAmount": 11, "clientId": "svc"})
		if _, has := out["reason"]; code != http.StatusTooManyRequests || has || out["message"] != "quota exhausted: 10 remaining in this period" {
			t.Fatalf("plain resource asking 11 of 10: %d %v", code, out)
		}
	})
}
