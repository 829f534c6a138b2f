package app_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The pools' gauges follow a pooled resource's lines at every scrape, and
// refusals are counted by reason and the line's tier (issue 21 §3). Limit
// 1000 cut 60/30/10 with borrowing 50 %: core (CORE, weight 2) has 200
// dedicated and may borrow 100, explore (EXPLORE, weight 1) 100 and 50.
func TestPoolMetrics(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	c := opsClient(t, s)
	res, plain := testenv.Resource(t), testenv.Resource(t)
	set := client.DefaultPoolSettings()
	set.Elasticity = "OFF"
	if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 1000, Pools: &set}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: plain, QuotaType: "TOKENS", TotalLimit: 100}); err != nil {
		t.Fatal(err)
	}
	for line, spec := range map[string]client.LineSpec{"core": {Tier: "CORE", Weight: 2}, "explore": {Tier: "EXPLORE", Weight: 1}} {
		if _, err := c.PutLine(ctxOf(t), res, line, spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 250, BusinessLine: "core"}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []client.ApplyRequest{
		{ResourceName: res, ClientID: "svc", ApplyAmount: 900, BusinessLine: "explore"}, // more than explore may use
		{ResourceName: res, ClientID: "svc", ApplyAmount: 800, BusinessLine: "explore"},
		{ResourceName: plain, ClientID: "svc", ApplyAmount: 101},
	} {
		if _, err := c.Apply(ctxOf(t), req); !errors.Is(err, client.ErrQuotaExhausted) {
			t.Fatalf("apply %+v: %v, want QUOTA_EXHAUSTED", req, err)
		}
	}
	// The refusal on a line answers the period's real remaining (1,000 −
	// 250) and advice for its reason, not 0 and "send critical work".
	code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 700,
		"businessLine": "explore", "clientId": "svc"})
	if msg, _ := out["message"].(string); code != http.StatusTooManyRequests || num(t, out, "remainingQuota") != 750 ||
		out["reason"] != "LINE_EXHAUSTED" || !strings.Contains(msg, "ask an operator for a grant") || strings.Contains(msg, "critical") {
		t.Fatalf("line refusal: %d %v", code, out)
	}
	body := scrapeAll(t, s)
	r := `resource="` + res + `"`
	for _, want := range []string{
		`quota_pool_size_tokens{pool="shared",` + r + `} 600`,
		`quota_pool_used_tokens{pool="shared",` + r + `} 50`,
		`quota_pool_size_tokens{pool="dedicated",` + r + `} 300`,
		`quota_pool_used_tokens{pool="dedicated",` + r + `} 200`,
		`quota_pool_size_tokens{pool="buffer",` + r + `} 100`,
		`quota_pool_used_tokens{pool="buffer",` + r + `} 0`,
		`quota_line_used_tokens{line="core",` + r + `} 250`,
		`quota_line_borrowed_tokens{line="core",` + r + `} 50`,
		`quota_line_dedicated_tokens{line="explore",` + r + `} 100`,
		// What each line could hold now, as the API's pools status answers
		// it (mayUse): dedicated + held of the shared pool + what it may
		// still borrow, the larger of its borrowing limit left and half of
		// the 550 free (275).
		`quota_line_may_use_tokens{line="core",` + r + `} 525`,
		`quota_line_may_use_tokens{line="explore",` + r + `} 375`,
		`quota_line_watermark_percent{line="core",` + r + `,tier="CORE"} 95`,
		`quota_line_watermark_percent{line="explore",` + r + `,tier="EXPLORE"} 60`,
		`quota_pool_refusals_total{reason="LINE_EXHAUSTED",` + r + `,tier="EXPLORE"} 3`,
		`quota_pool_refusals_total{reason="EXHAUSTED",resource="` + plain + `",tier="none"} 1`,
	} {
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A resource without lines or grants has no pool series.
	if strings.Contains(body, `quota_pool_size_tokens{pool="shared",resource="`+plain+`"}`) {
		t.Errorf("/metrics has pool series for %s, which has no pools", plain)
	}
	// A grant shows as the grant pool; the gauges are read at each scrape.
	until := time.Now().Add(time.Hour)
	if _, err := c.GrantQuota(ctxOf(t), res, client.GrantRequest{Amount: 70, BusinessLine: "explore", ExpiresAt: &until}); err != nil {
		t.Fatal(err)
	}
	body = scrapeAll(t, s)
	if !strings.Contains(body, "\n"+`quota_pool_size_tokens{pool="grant",`+r+`} 70`+"\n") {
		t.Errorf("/metrics lacks the grant pool's 70")
	}
}

func scrapeAll(t *testing.T, s *testenv.Server) string {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return "\n" + string(b)
}
