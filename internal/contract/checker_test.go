package contract_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestCheckerRejectsAnswersTheDocumentDoesNotDescribe holds the checker
// itself to account: answers of a fake server that break the document in
// the ways issue 22 saw (a missing required field, a field the document
// does not declare, an array where an object is declared, a status the
// operation does not list) are each reported.
func TestCheckerRejectsAnswersTheDocumentDoesNotDescribe(t *testing.T) {
	cases := []struct {
		name, path string
		status     int
		body, want string
	}{
		{"a required field missing", "/admin/policies", 200, `{"policies":[]}`, "does not match openapi.yaml"},
		{"a field the document does not declare", "/admin/policies", 200,
			`{"success":true,"code":"SUCCESS","policies":[],"extra":1}`, "does not declare"},
		{"an array for an object", "/admin/reconcile", 200, `{"success":true,"code":"SUCCESS","reports":{}}`, "cannot decode"},
		{"a status the operation does not list", "/admin/policies", 418, `{"success":false,"code":"X","message":"m"}`, "status is not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer fake.Close()
			c := newChecker(t, &testenv.Server{URL: fake.URL})
			method := http.MethodGet
			if strings.HasSuffix(tc.path, "reconcile") {
				method = http.MethodPost
			}
			hr, err := http.NewRequest(method, fake.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			_, errs := c.check(hr, answer{status: tc.status, header: resp.Header, body: []byte(tc.body)})
			var all []string
			for _, e := range errs {
				all = append(all, e.Error())
			}
			if !strings.Contains(strings.Join(all, "\n"), tc.want) {
				t.Errorf("checker reported %q, want an error with %q", all, tc.want)
			}
		})
	}
}
