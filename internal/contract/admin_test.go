package contract_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/contract/apiclient"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// admin calls the session, usage, audit and reconcile operations on res,
// which has the open session contract-open (100 tokens).
func admin(c *checker, res string) {
	c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res + "&status=USING&limit=1"}, http.StatusOK)
	page := c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res + "&limit=1"}, http.StatusOK)
	if cursor, ok := page.obj(c.t)["nextCursor"].(string); ok {
		c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res + "&limit=1&cursor=" + url.QueryEscape(cursor)}, http.StatusOK)
	} else {
		c.t.Errorf("a page of 1 of several sessions has no nextCursor: %s", page.body)
	}
	c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res + "&cursor=not-a-cursor"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res + "&status=NOPE"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: "/admin/sessions?resourceName=" + res + "-none"}, http.StatusNotFound)

	open := c.do(req{method: http.MethodPost, path: "/quota/apply", body: map[string]any{"resourceName": res, "applyAmount": 10}}, http.StatusOK)
	id := open.str(c.t, "sessionId")
	ff := "/admin/sessions/" + id + "/finish"
	c.do(req{method: http.MethodPost, path: ff, body: map[string]any{"resourceName": res, "clientId": clientID, "reason": "contract"}}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: ff, body: map[string]any{"resourceName": res, "clientId": clientID}}, http.StatusConflict)
	c.do(req{method: http.MethodPost, path: "/admin/sessions/contract-none/finish", body: map[string]any{"resourceName": res}}, http.StatusNotFound)
	c.do(req{method: http.MethodPost, path: ff, body: map[string]any{"amount": -1}}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: ff, raw: []byte(`x`), contentType: "text/plain"}, http.StatusUnsupportedMediaType)
	c.do(req{method: http.MethodPost, path: ff, raw: hugeBody()}, http.StatusRequestEntityTooLarge)

	for _, by := range []string{"client", "line", "hour", "day"} {
		c.do(req{method: http.MethodGet, path: "/admin/usage?resourceName=" + res + "&groupBy=" + by}, http.StatusOK)
	}
	from := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	c.do(req{method: http.MethodGet, path: "/admin/usage?resourceName=" + res + "&from=" + from}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/admin/usage?resourceName=" + res + "&from=yesterday"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: "/admin/usage?resourceName=" + res + "&groupBy=week"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: "/admin/usage?resourceName=" + res + "-none"}, http.StatusNotFound)

	c.do(req{method: http.MethodPost, path: "/admin/reconcile?resourceName=" + res}, http.StatusOK)
	c.do(req{method: http.MethodPost, path: "/admin/reconcile?resourceName=" + res + "-none"}, http.StatusNotFound)
	c.do(req{method: http.MethodPost, path: "/admin/reconcile?resourceName=Not%20A%20Name"}, http.StatusBadRequest)

	c.do(req{method: http.MethodGet, path: "/admin/audit"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/admin/audit?resourceName=" + res + "&limit=500"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/admin/audit?limit=0"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: "/admin/audit?limit=1&before=1000000"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/admin/audit?nope=1"}, http.StatusBadRequest)
	c.do(req{method: http.MethodGet, path: "/admin/audit?actor=contract&action=policy.put&limit=5"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: "/admin/audit?action=Policy%20Put"}, http.StatusBadRequest)
	reconcileEntryDecodes(c, res)
}

// reconcileEntryDecodes reads res's audit log with the generated client
// itself (its request, its decoding) and finds the reconcile entry, whose
// "after" is the array of reconciliation reports (issue 22 item 8: the
// document declared an object, and a generated client failed on it).
func reconcileEntryDecodes(c *checker, res string) {
	c.t.Helper()
	cl, err := apiclient.NewClientWithResponses(c.s.URL, apiclient.WithRequestEditorFn(
		func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+adminToken)
			return nil
		}))
	if err != nil {
		c.t.Fatal(err)
	}
	name := apiclient.ResourceName(res)
	got, err := cl.ListAuditWithResponse(context.Background(), &apiclient.ListAuditParams{ResourceName: &name})
	if err != nil {
		c.t.Fatalf("GET /admin/audit with the generated client: %v", err)
	}
	if got.JSON200 == nil {
		c.t.Fatalf("GET /admin/audit: %d %s", got.StatusCode(), got.Body)
	}
	for _, e := range got.JSON200.Entries {
		if e.Action != "reconcile" {
			continue
		}
		reports, ok := any(e.After).([]any)
		if !ok || len(reports) == 0 {
			c.t.Fatalf("the reconcile entry's after is %T %v, want the reports", e.After, e.After)
		}
		rep, ok := reports[0].(map[string]any)
		if !ok || rep["resource"] != res {
			c.t.Fatalf("the reconcile entry's first report is %v, want one of %s", reports[0], res)
		}
		return
	}
	c.t.Fatalf("no reconcile entry for %s in %s", res, got.Body)
}

// TestReconcileAuditEntryDecodes is the reproduction of issue 22 item 8 on
// its own: the generated client decodes a reconcile audit entry.
func TestReconcileAuditEntryDecodes(t *testing.T) {
	s, _ := startServer(t, testenv.Dev)
	c := newChecker(t, s)
	res := "contract-audit"
	c.do(req{method: http.MethodPut, path: "/admin/policies/" + res, body: map[string]any{"quotaType": "COUNT", "totalLimit": 10}}, http.StatusCreated)
	c.do(req{method: http.MethodPost, path: "/admin/reconcile?resourceName=" + res}, http.StatusOK)
	reconcileEntryDecodes(c, res)
}
