package app_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// A refused apply on a CORE, a GROWTH and an EXPLORE line answers the
// line's real remaining (issue 21 §3): lineRemaining is exactly what the
// line can be granted next (an apply of that much is granted, one more is
// refused), remainingQuota is the period's as status answers it, and the
// message gives the figure, with advice for a line asking more than it may
// get (LINE_EXHAUSTED) or short of shared pool (POOL_EXHAUSTED: core's
// borrowing leaves growth and explore only their dedicated parts). Limit 12,000 cut 60/30/10 (elasticity off): core (CORE, weight 3),
// growth (GROWTH, 2), explore (EXPLORE, 1).
func TestRefusalsOnEachTierGiveTheLinesRemaining(t *testing.T) {
	s := testenv.Start(t, testenv.Real)
	c := opsClient(t, s)
	res := testenv.Resource(t)
	set := client.DefaultPoolSettings()
	set.Elasticity = "OFF"
	if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 12000, Pools: &set}); err != nil {
		t.Fatal(err)
	}
	lines := []struct{ name, tier string }{{"core", "CORE"}, {"growth", "GROWTH"}, {"explore", "EXPLORE"}}
	for i, l := range lines {
		if _, err := c.PutLine(ctxOf(t), res, l.name, client.LineSpec{Tier: l.tier, Weight: int64(3 - i)}); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(line string, amount int64) (int, map[string]any) {
		code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": amount,
			"businessLine": line, "clientId": "svc", "continuation": true})
		return code, out
	}
	for _, l := range lines {
		code, out := apply(l.name, 11999)
		msg, _ := out["message"].(string)
		if code != http.StatusTooManyRequests || (out["reason"] != "LINE_EXHAUSTED" && out["reason"] != "POOL_EXHAUSTED") {
			t.Fatalf("%s asking 11,999: %d %v", l.name, code, out)
		}
		left := num(t, out, "lineRemaining")
		st, err := c.Status(ctxOf(t), res)
		if err != nil {
			t.Fatal(err)
		}
		if left <= 0 || num(t, out, "remainingQuota") != st.RemainingQuota ||
			strings.Contains(msg, "critical") ||
			(out["reason"] == "LINE_EXHAUSTED" && !strings.Contains(msg, "only "+strconv.FormatInt(left, 10)+" more")) ||
			(out["reason"] == "POOL_EXHAUSTED" && !strings.Contains(msg, "the line could be granted "+strconv.FormatInt(left, 10)+" now")) {
			t.Fatalf("%s refused: lineRemaining %d, status remaining %d, %v", l.name, left, st.RemainingQuota, out)
		}
		if code, out := apply(l.name, left+1); code != http.StatusTooManyRequests || num(t, out, "lineRemaining") != left {
			t.Fatalf("%s asking %d, one more than it may get: %d %v", l.name, left+1, code, out)
		}
		if code, out := apply(l.name, left); code != http.StatusOK || num(t, out, "lineRemaining") != 0 {
			t.Fatalf("%s asking the %d it was told: %d %v", l.name, left, code, out)
		}
		code, out = apply(l.name, 1)
		msg, _ = out["message"].(string)
		if code != http.StatusTooManyRequests || num(t, out, "lineRemaining") != 0 || strings.Contains(msg, "only") ||
			(out["reason"] == "LINE_EXHAUSTED" && !strings.Contains(msg, "used all it may use")) ||
			(out["reason"] == "POOL_EXHAUSTED" && !strings.Contains(msg, "the line could be granted 0 now")) {
			t.Fatalf("%s with nothing left: %d %v", l.name, code, out)
		}
	}
}
