package contract_test

import (
	"net/http"
	"time"

	"github.com/jmoiron/sqlx"
)

// poolRoutes gives res (a fresh name) a policy with business lines and
// calls every pool operation. ledger writes to the server's ledger: the
// reclaims to confirm and cancel are planted there (the pool controller
// makes them only under load).
func poolRoutes(c *checker, res string, ledger *sqlx.DB) {
	p := "/admin/policies/" + res
	none := "/admin/policies/" + res + "-none"
	c.do(req{method: http.MethodPut, path: p, body: map[string]any{"quotaType": "TOKENS", "totalLimit": 10000}}, http.StatusCreated)

	c.do(req{method: http.MethodGet, path: p + "/pools"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: none + "/pools"}, http.StatusNotFound)
	settings := map[string]any{"sharedPercent": 50, "dedicatedPercent": 40, "bufferPercent": 10, "reclaimConfirmSeconds": 0}
	c.do(req{method: http.MethodPut, path: p + "/pools", body: settings}, http.StatusOK)
	c.do(req{method: http.MethodPut, path: p + "/pools", body: map[string]any{"sharedPercent": 90, "dedicatedPercent": 40, "bufferPercent": 10}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPut, path: none + "/pools", body: settings}, http.StatusNotFound)

	for _, line := range []string{"core", "growth", "extra"} {
		c.do(req{method: http.MethodPut, path: p + "/lines/" + line, body: map[string]any{"tier": "CORE", "weight": 1}}, http.StatusCreated)
	}
	c.do(req{method: http.MethodPut, path: p + "/lines/growth", body: map[string]any{"tier": "GROWTH", "weight": 2}}, http.StatusOK)
	c.do(req{method: http.MethodPut, path: p + "/lines/core", body: map[string]any{"tier": "NOPE"}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPut, path: none + "/lines/core", body: map[string]any{"tier": "CORE"}}, http.StatusNotFound)
	c.do(req{method: http.MethodGet, path: p + "/lines"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: none + "/lines"}, http.StatusNotFound)
	c.do(req{method: http.MethodGet, path: "/quota/status?resourceName=" + res}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: p}, http.StatusOK)
	merge := "application/merge-patch+json"
	c.do(req{method: http.MethodPatch, path: p, raw: []byte(`{"pools": {"borrowLimitPercent": 40}}`), contentType: merge}, http.StatusOK)
	c.do(req{method: http.MethodPut, path: p, body: map[string]any{"quotaType": "TOKENS", "totalLimit": 10000, "pools": settings}}, http.StatusOK)

	open := c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": res, "applyAmount": 100, "businessLine": "core"}}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": res, "applyAmount": 100}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": res, "applyAmount": 100000, "businessLine": "core"}}, http.StatusTooManyRequests)
	c.do(req{method: http.MethodDelete, path: p + "/lines/core"}, http.StatusConflict)
	c.do(req{method: http.MethodPost, path: "/quota/finish", body: map[string]any{"resourceName": res, "sessionId": open.str(c.t, "sessionId"), "actualUsedAmount": 10}}, http.StatusOK)
	c.do(req{method: http.MethodDelete, path: p + "/lines/extra"}, http.StatusOK)
	c.do(req{method: http.MethodDelete, path: p + "/lines/extra"}, http.StatusNotFound)

	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	g := c.do(req{method: http.MethodPost, path: p + "/grants", body: map[string]any{"amount": 10, "businessLine": "core", "expiresAt": until, "reason": "contract"}}, http.StatusCreated)
	c.do(req{method: http.MethodPost, path: p + "/grants", body: map[string]any{"amount": 0, "expiresAt": until}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: none + "/grants", body: map[string]any{"amount": 10, "expiresAt": until}}, http.StatusNotFound)
	c.do(req{method: http.MethodGet, path: p + "/grants"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: none + "/grants"}, http.StatusNotFound)
	grant, _ := g.obj(c.t)["grant"].(map[string]any)
	id, _ := grant["id"].(string)
	c.do(req{method: http.MethodDelete, path: p + "/grants/" + id}, http.StatusOK)
	c.do(req{method: http.MethodDelete, path: p + "/grants/g-none"}, http.StatusNotFound)

	rel := c.do(req{method: http.MethodPost, path: p + "/buffer/release", body: map[string]any{"amount": 1, "businessLine": "growth", "expiresAt": until}}, http.StatusCreated)
	relID, _ := rel.obj(c.t)["release"].(map[string]any)["id"].(string)
	// The listing gives a release's held, its void what it returned.
	c.do(req{method: http.MethodGet, path: p + "/grants"}, http.StatusOK)
	if v := c.do(req{method: http.MethodDelete, path: p + "/grants/" + relID}, http.StatusOK).obj(c.t); v["kind"] != "RELEASE" || v["returned"] == nil {
		c.t.Fatalf("a release's void: %v", v)
	}
	c.do(req{method: http.MethodPost, path: p + "/buffer/release", body: map[string]any{"amount": 1, "businessLine": "growth", "expiresAt": until}}, http.StatusCreated)
	c.do(req{method: http.MethodPost, path: p + "/buffer/release", body: map[string]any{"amount": 1 << 40, "expiresAt": until}}, http.StatusConflict)
	c.do(req{method: http.MethodPost, path: p + "/buffer/release", body: map[string]any{"amount": -1}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: none + "/buffer/release", body: map[string]any{"amount": 1}}, http.StatusNotFound)

	c.do(req{method: http.MethodGet, path: p + "/reclaims"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: none + "/reclaims"}, http.StatusNotFound)
	c.do(req{method: http.MethodPost, path: p + "/reclaims/r-none/confirm"}, http.StatusNotFound)
	c.do(req{method: http.MethodPost, path: p + "/reclaims/r-none/cancel"}, http.StatusNotFound)
	plantReclaims(c, ledger, res)
	c.do(req{method: http.MethodPost, path: p + "/reclaims/" + res + "-r1/confirm"}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: p + "/reclaims/" + res + "-r1/confirm"}, http.StatusConflict)
	c.do(req{method: http.MethodPost, path: p + "/reclaims/" + res + "-r2/cancel"}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: p + "/reclaims/" + res + "-r2/cancel"}, http.StatusConflict)
	c.do(req{method: http.MethodGet, path: p + "/reclaims"}, http.StatusOK)

	c.do(req{method: http.MethodGet, path: p + "/pool-events"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: p + "/pool-events?limit=5"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: p + "/pool-events?limit=nope"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: none + "/pool-events"}, http.StatusNotFound)
	c.do(req{method: http.MethodGet, path: "/admin/audit?resourceName=" + res}, http.StatusOK)

	// The resource itself used up (an overage finished on growth took the
	// limit): a line's 429 gives reason EXHAUSTED, which the document lists.
	over := c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": res, "applyAmount": 10, "businessLine": "growth"}}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: "/quota/finish", body: map[string]any{"resourceName": res, "sessionId": over.str(c.t, "sessionId"), "actualUsedAmount": 20000}}, http.StatusOK)
	if r := c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": res, "applyAmount": 1, "businessLine": "core"}}, http.StatusTooManyRequests).str(c.t, "reason"); r != "EXHAUSTED" {
		c.t.Fatalf("a line's apply on a used-up resource: reason %q, want EXHAUSTED", r)
	}
}

// plantReclaims writes two WARNED reclaims of res from growth to core into
// the ledger, as the pool controller would.
func plantReclaims(c *checker, ledger *sqlx.DB, res string) {
	c.t.Helper()
	now := time.Now().UnixMilli()
	for _, id := range []string{res + "-r1", res + "-r2"} {
		_, err := ledger.Exec(`INSERT INTO quota_reclaim (id, resource_name, from_line, to_line, amount, state,
			dry_run, warned_ms, updated_ms, reason) VALUES (?, ?, 'growth', 'core', 1, 'WARNED', 0, ?, ?, 'contract')`,
			id, res, now, now)
		if err != nil {
			c.t.Fatalf("plant reclaim %s: %v", id, err)
		}
	}
}
