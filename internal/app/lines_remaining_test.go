package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestApplyOnALineAnswersThePeriodsRemaining: on a resource with business
// lines, apply, finish and status answer the same remainingQuota — the
// period's (limit − charged − reserved) — and the apply adds what the line
// itself can still get as lineRemaining. The apply used to answer the
// line's headroom as remainingQuota (limit 1000, line a dedicated 200,
// 60 used: apply 5 on a → 295 where finish and status said 935). A
// resource with a temporary grant and no lines answers the same figure
// everywhere, the grants' room added (limit 10,000, grant 100, apply 20 →
// 10,080 in apply, status and finish; TestRemainingQuotaAddsTheGrantsRoom).
func TestApplyOnALineAnswersThePeriodsRemaining(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		set := client.DefaultPoolSettings()
		set.Elasticity = "OFF"
		if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 1000, Pools: &set}); err != nil {
			t.Fatal(err)
		}
		for line, body := range map[string]map[string]any{"a": {"tier": "CORE", "dedicated": 200}, "b": {"tier": "GROWTH", "weight": 1}} {
			if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+res+"/lines/"+line, body); code != http.StatusCreated {
				t.Fatalf("put line %s: %d %v", line, code, out)
			}
		}
		first, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 60, BusinessLine: "b"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: first.SessionID, ActualUsedAmount: 60}); err != nil {
			t.Fatal(err)
		}
		a, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 5, BusinessLine: "a"})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Status(ctxOf(t), res)
		if err != nil {
			t.Fatal(err)
		}
		if a.RemainingQuota != 935 || st.RemainingQuota != 935 {
			t.Fatalf("after apply 5 on a: apply remainingQuota %d, status %d; want 935 both", a.RemainingQuota, st.RemainingQuota)
		}
		// Line a: 195 of its dedicated part left, and what it may borrow of
		// the shared pool (less than the period's remaining).
		if a.LineRemaining == nil || *a.LineRemaining < 195 || *a.LineRemaining >= a.RemainingQuota {
			t.Fatalf("lineRemaining %v, want 195 … 934", a.LineRemaining)
		}
		// A replay answers as the first apply did.
		again, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 5, BusinessLine: "a", SessionID: a.SessionID})
		if err != nil || again.RemainingQuota != 935 || again.LineRemaining == nil || *again.LineRemaining != *a.LineRemaining {
			t.Fatalf("replay: %+v %v", again, err)
		}
		f, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: a.SessionID, ActualUsedAmount: 3})
		if err != nil {
			t.Fatal(err)
		}
		if st, err = c.Status(ctxOf(t), res); err != nil || f.RemainingQuota != 937 || st.RemainingQuota != 937 {
			t.Fatalf("after finish: finish remainingQuota %d, status %+v %v; want 937", f.RemainingQuota, st, err)
		}
		// A resource without lines has no lineRemaining.
		plain := testenv.Resource(t)
		if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: plain, QuotaType: "TOKENS", TotalLimit: 100}); err != nil {
			t.Fatal(err)
		}
		if p, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: plain, ClientID: "svc", ApplyAmount: 5}); err != nil || p.RemainingQuota != 95 || p.LineRemaining != nil {
			t.Fatalf("apply without lines: %+v %v", p, err)
		}
		granted := testenv.Resource(t)
		if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: granted, QuotaType: "TOKENS", TotalLimit: 10000}); err != nil {
			t.Fatal(err)
		}
		exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if code, out, _ := call(t, s, http.MethodPost, "/admin/policies/"+granted+"/grants", map[string]any{"amount": 100, "expiresAt": exp, "reason": "launch"}); code != http.StatusCreated {
			t.Fatalf("grant: %d %v", code, out)
		}
		g, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: granted, ClientID: "svc", ApplyAmount: 20})
		if err != nil {
			t.Fatal(err)
		}
		if st, err = c.Status(ctxOf(t), granted); err != nil || g.RemainingQuota != st.RemainingQuota || g.RemainingQuota != 10080 || g.LineRemaining != nil {
			t.Fatalf("apply with a grant: remainingQuota %d lineRemaining %v, status %+v %v; want 10080 both", g.RemainingQuota, g.LineRemaining, st, err)
		}
		gf, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: granted, SessionID: g.SessionID, ActualUsedAmount: 20})
		if err != nil || gf.RemainingQuota != 10080 {
			t.Fatalf("finish with a grant: %+v %v; want remainingQuota 10080", gf, err)
		}
	})
}

// TestRemainingQuotaAddsTheGrantsRoom (docs/pools.md §5, open finding 4):
// once grants are drawn, remainingQuota is the period's limit less what
// sessions hold of it (never below 0) plus what the grants in force may
// still give, the same in the apply (granted and refused: body and
// message), finish and status answers. It was limit − charged − reserved,
// negative once a grant was drawn ("-20 remaining" in the 429's message,
// where -1 means "unknown" in a fail-open answer). With lines (a line's
// grant) and without. Dev mode and real Redis + MariaDB.
func TestRemainingQuotaAddsTheGrantsRoom(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		for _, withLines := range []bool{false, true} {
			res := testenv.Resource(t)
			if _, err := c.PutPolicy(ctxOf(t), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 100}); err != nil {
				t.Fatal(err)
			}
			line, grant := "", map[string]any{"amount": 50, "expiresAt": exp, "reason": "launch"}
			if withLines {
				line = "a"
				if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+res+"/lines/a", map[string]any{"tier": "CORE", "weight": 1}); code != http.StatusCreated {
					t.Fatalf("put line: %d %v", code, out)
				}
				grant["businessLine"] = "a"
			}
			if code, out, _ := call(t, s, http.MethodPost, "/admin/policies/"+res+"/grants", grant); code != http.StatusCreated {
				t.Fatalf("grant: %d %v", code, out)
			}
			// 120 of a limit of 100 and a grant of 50: 30 left (was -20).
			a, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ClientID: "svc", ApplyAmount: 120, BusinessLine: line})
			if err != nil {
				t.Fatalf("lines %v: apply 120: %v", withLines, err)
			}
			if a.RemainingQuota != 30 {
				t.Fatalf("lines %v: apply 120 answered remainingQuota %d, want 30", withLines, a.RemainingQuota)
			}
			code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "clientId": "svc", "applyAmount": 40, "businessLine": line})
			msg, _ := out["message"].(string)
			if code != http.StatusTooManyRequests || fmt.Sprint(out["remainingQuota"]) != "30" || !strings.Contains(msg, "30 remaining") || strings.Contains(msg, "-") {
				t.Fatalf("lines %v: apply 40: %d %v, want 429 with remainingQuota 30 (and \"30 remaining\")", withLines, code, out)
			}
			st, err := c.Status(ctxOf(t), res)
			if err != nil || st.RemainingQuota != 30 {
				t.Fatalf("lines %v: status %+v %v, want remainingQuota 30", withLines, st, err)
			}
			f, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: a.SessionID, ActualUsedAmount: 110})
			if err != nil || f.RemainingQuota != 40 {
				t.Fatalf("lines %v: finish 110 of 120: %+v %v, want remainingQuota 40", withLines, f, err)
			}
			if st, err = c.Status(ctxOf(t), res); err != nil || st.RemainingQuota != 40 {
				t.Fatalf("lines %v: status after finish %+v %v, want 40", withLines, st, err)
			}
		}
	})
}
