package contract_test

import (
	"net/http"
	"strings"
)

// unauthenticated calls every operation of the document under /admin/ and
// /quota/ without credentials (401 UNAUTHENTICATED) and with a wrong
// admin token or API key (401 as well).
func unauthenticated(c *checker, res string) {
	doc := loadSpec(c.t)
	fill := strings.NewReplacer("{resourceName}", res, "{line}", "core", "{id}", "x", "{sessionId}", "x")
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/admin/") && !strings.HasPrefix(path, "/quota/") {
			continue
		}
		for method, op := range item.Operations() {
			r := req{method: method, path: fill.Replace(path), noAuth: true}
			if op.RequestBody != nil {
				r.raw = []byte(`{}`)
				if method == http.MethodPatch {
					r.contentType = "application/merge-patch+json"
				}
			}
			c.do(r, http.StatusUnauthorized)
			if strings.HasPrefix(path, "/admin/") {
				r.header = map[string]string{"Authorization": "Bearer wrong-token-0123456789abcdef"}
			} else {
				r.header = map[string]string{"X-API-Key": "wrong-key-0123456789abcdef"}
			}
			c.do(r, http.StatusUnauthorized)
		}
	}
}

// deletes deletes res: refused while contract-open is open (409), then done.
func deletes(c *checker, res string) {
	p := "/admin/policies/" + res
	c.do(req{method: http.MethodDelete, path: p}, http.StatusConflict)
	c.do(req{method: http.MethodDelete, path: p + "-none"}, http.StatusNotFound)
	c.do(req{method: http.MethodDelete, path: "/admin/policies/Not%20A%20Name"}, http.StatusBadRequest)
	c.do(req{method: http.MethodPost, path: "/quota/finish", body: map[string]any{"resourceName": res, "sessionId": "contract-open", "actualUsedAmount": 100}}, http.StatusOK)
	c.do(req{method: http.MethodDelete, path: p + "?reason=contract"}, http.StatusOK)
	c.do(req{method: http.MethodGet, path: p}, http.StatusNotFound)
}
