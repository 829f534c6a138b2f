package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// TestVoidingAGrantTakesAnAuditReason: DELETE …/grants/{id} takes an
// optional ?reason=, as the other destructive admin steps do (DELETE
// /admin/policies/{r}, reclaim confirm and cancel): it is checked by the
// same rules (a bad one is 400 and the grant stays), and recorded as the
// grant.void audit entry's reason, with the grant as it was before. The
// query was refused and the entry had no reason.
func TestVoidingAGrantTakesAnAuditReason(t *testing.T) {
	a, sql := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	base := "/admin/policies/llm"
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	id := a.post(t, base+"/grants", `{"amount":5,"expiresAt":"`+exp+`","reason":"launch"}`).body["grant"].(map[string]any)["id"].(string)
	for _, q := range []string{"?reason=" + url.QueryEscape("a\x07b"), "?reason=" + strings.Repeat("x", 501), "?reason=a&reason=b", "?why=x"} {
		if r := a.do(t, request{method: http.MethodDelete, path: base + "/grants/" + id + q}); r.status != http.StatusBadRequest || r.body["code"] != "INVALID_ARGUMENT" {
			t.Errorf("void %s: %d %s, want 400", q, r.status, r.raw)
		}
	}
	if r := a.get(t, base+"/grants"); strings.Contains(string(r.raw), "voidedAt") {
		t.Fatalf("a refused void voided the grant: %s", r.raw)
	}
	a.mustOK(t, request{method: http.MethodDelete, path: base + "/grants/" + id + "?reason=" + url.QueryEscape("launch called off")})
	es, err := sql.ListAudit(t.Context(), quota.AuditFilter{Resource: "llm", Action: "grant.void", Limit: 10})
	if err != nil || len(es) != 1 {
		t.Fatalf("grant.void entries: %+v %v", es, err)
	}
	var before map[string]any
	_ = json.Unmarshal(es[0].Before, &before)
	e := map[string]any{"reason": es[0].Reason}
	if e["reason"] != "launch called off" || before["id"] != id || before["reason"] != "launch" {
		t.Fatalf("grant.void entry %+v, want reason %q and the grant before", es[0], "launch called off")
	}
}
