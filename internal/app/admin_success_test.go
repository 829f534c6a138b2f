package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestAdminAnswersSaySuccess: POST …/grants, POST …/buffer/release and POST
// /admin/reconcile answer "success": true and "code": "SUCCESS" like every
// other endpoint (a reviewer saw the first and the last without it).
func TestAdminAnswersSaySuccess(t *testing.T) {
	s := testenv.Start(t, testenv.Real)
	r := testenv.Resource(t)
	putPolicy(t, s, r, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000})
	if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+r+"/lines/a", map[string]any{"tier": "CORE", "weight": 1}); code != http.StatusCreated {
		t.Fatalf("put line: %d %v", code, out)
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		path string
		body any
		want int
	}{
		{"/admin/policies/" + r + "/grants", map[string]any{"amount": 10, "expiresAt": exp, "reason": "launch"}, http.StatusCreated},
		{"/admin/policies/" + r + "/buffer/release", map[string]any{"amount": 10, "businessLine": "a", "reason": "promo"}, http.StatusCreated},
		{"/admin/reconcile?resourceName=" + r, nil, http.StatusOK},
	} {
		code, out, _ := call(t, s, http.MethodPost, c.path, c.body)
		if code != c.want || out["success"] != true || out["code"] != "SUCCESS" {
			t.Errorf("POST %s: %d %v, want %d with success true", c.path, code, out, c.want)
		}
	}
}
