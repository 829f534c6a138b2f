package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The SDK's types carry the pools: PutPolicy sends PolicySpec.Pools and
// decodes Policy.Pools from the server's answer, and Status decodes the
// server's "pools" (lines, grants) into QuotaStatus.Pools; a resource
// without pools has none.
func TestSDKDecodesThePools(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		set := client.DefaultPoolSettings()
		set.BorrowLimitPercent, set.Elasticity = 200, "OFF"
		p, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 10_000, Pools: &set})
		if err != nil {
			t.Fatal(err)
		}
		if p.Pools == nil || *p.Pools != set {
			t.Fatalf("policy answer's pools %+v, want %+v", p.Pools, set)
		}
		plain := testenv.Resource(t)
		if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: plain, QuotaType: "TOKENS", TotalLimit: 100}); err != nil {
			t.Fatal(err)
		}
		if st, err := c.Status(ctxOf(t), plain); err != nil || st.Pools != nil {
			t.Fatalf("status of a resource without pools: %+v %v", st, err)
		}

		if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+res+"/lines/search", map[string]any{"tier": "CORE", "weight": 1}); code != http.StatusCreated {
			t.Fatalf("put line: %d %v", code, out)
		}
		exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		if code, out, _ := call(t, s, http.MethodPost, "/admin/policies/"+res+"/grants",
			map[string]any{"amount": 500, "businessLine": "search", "expiresAt": exp.Format(time.RFC3339), "reason": "launch"}); code != http.StatusCreated {
			t.Fatalf("grant: %d %v", code, out)
		}
		a, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 4000, BusinessLine: "search"})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Status(ctxOf(t), res)
		if err != nil {
			t.Fatal(err)
		}
		ps := st.Pools
		if ps == nil || ps.Shared != 6000 || ps.Buffer != 1000 || ps.BufferFree != 1000 || ps.Elasticity != "OFF" || len(ps.Lines) != 1 || len(ps.Grants) != 1 {
			t.Fatalf("pools %+v", ps)
		}
		// 3000 dedicated, then 1000 of the shared pool (borrowing limit 6000).
		l := ps.Lines[0]
		want := client.LineStatus{BusinessLine: "search", Tier: "CORE", Dedicated: 3000, Used: a.GrantedAmount, Reserved: 4000,
			Borrowed: 1000, BorrowLimit: 6000, MayUse: 9000, WatermarkPercent: 95, ElasticityMode: "OFF"}
		if l != want || ps.SharedUsed != 1000 {
			t.Fatalf("line %+v shared used %d\nwant %+v", l, ps.SharedUsed, want)
		}
		g := ps.Grants[0]
		if g.ID == "" || g.Kind != "GRANT" || g.BusinessLine != "search" || g.Amount != 500 || g.Used != 0 || !g.Active ||
			g.ExpiresAt == nil || !g.ExpiresAt.Equal(exp) || g.Reason != "launch" || g.CreatedAt.IsZero() || g.VoidedAt != nil {
			t.Fatalf("grant %+v", g)
		}
	})
}
