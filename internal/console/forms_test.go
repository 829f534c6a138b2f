package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// A console form is read as strictly as a JSON body: a field given twice
// (limit=10&limit=20, where the first used to win) and an amount with a
// sign or a leading zero (+7 used to be 7) are 400 with the console's error
// page, and nothing changes; a POST with neither Origin nor Referer is
// judged by its CSRF token (docs/console.md); grouped digits still work.
func TestConsoleFormsAreReadLikeTheJSONAPI(t *testing.T) {
	c, res, ap, o := aSessionToChange(t, "ops-eve")
	ctx := context.Background()
	limitPath := "/resources/" + res + "/limit"
	finishPath := "/sessions/" + ap.SessionID + "/finish"
	change := func(kv ...string) url.Values {
		v := url.Values{"reason": {"r"}, "confirm": {"yes"}}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	for _, f := range []struct {
		path string
		form url.Values
		want string
	}{
		{limitPath, change("limit", "10", "limit", "20"), "“limit” more than once"},
		{limitPath, change("limit", "10", "reason", "again"), "“reason” more than once"},
		{limitPath, change("limit", "+7"), "the limit must be a whole number"},
		{limitPath, change("limit", "007"), "the limit must be a whole number"},
		{limitPath, change("limit", "-0"), "the limit must be a whole number"},
		{limitPath, change("limit", "1e3"), "the limit must be a whole number"},
		{limitPath, change("limit", "9007199254740992"), "the limit must be a whole number"},
		{finishPath, change("resource", res, "amount", "+5"), "the amount must be a whole number"},
		{finishPath, change("resource", res, "amount", "05"), "the amount must be a whole number"},
		{finishPath, change("resource", res, "amount", "5", "amount", "500"), "“amount” more than once"},
	} {
		code, body := o.post(f.path, f.form)
		if code != http.StatusBadRequest || !strings.Contains(body, f.want) || !strings.Contains(body, "nothing was changed") {
			t.Errorf("%s %v: %d, want 400 saying %q\n%s", f.path, f.form, code, f.want, body)
		}
	}
	if code, body := o.post("/login", url.Values{"token": {adminToken, adminToken}}); code != http.StatusBadRequest || !strings.Contains(body, "“token” more than once") {
		t.Errorf("sign-in with the token twice: %d, want 400\n%s", code, body)
	}
	p, err := c.GetPolicy(ctx, res)
	if err != nil || p.TotalLimit != 1000 {
		t.Fatalf("refused forms changed the policy: %+v, %v", p, err)
	}
	if st, err := c.Status(ctx, res); err != nil || st.ActiveSessions != 1 || st.ReservedAmount != 300 {
		t.Fatalf("refused forms finished the session: %+v, %v", st, err)
	}
	// o's client sends neither Origin nor Sec-Fetch-Site: the token decides.
	if code, body := o.post(limitPath, change("limit", "1,500")); code != http.StatusSeeOther {
		t.Fatalf("a proper change with grouped digits and no Origin/Sec-Fetch-Site: %d\n%s", code, body)
	}
	if p, _ := c.GetPolicy(ctx, res); p.TotalLimit != 1500 {
		t.Fatalf("limit %d, want 1500", p.TotalLimit)
	}
}

// An unknown console path, a missing static asset and a path that climbs
// out of the static files are 404 with the API's JSON error body, and a
// wrong method is 405 the same way; an asset that exists is served.
func TestConsoleNotFoundIsJSON(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/admin/ui/static/no-such.js", http.StatusNotFound, "NOT_FOUND"},
		{"GET", "/admin/ui/static/", http.StatusNotFound, "NOT_FOUND"},
		{"GET", "/admin/ui/static/..%2fconsole.go", http.StatusNotFound, "NOT_FOUND"},
		{"GET", "/admin/ui/static/%2e%2e/templates/layout.html", http.StatusNotFound, "NOT_FOUND"},
		{"GET", "/admin/ui/no-such-page", http.StatusNotFound, "NOT_FOUND"},
		{"DELETE", "/admin/ui/login", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"},
	} {
		req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct {
			Success *bool  `json:"success"`
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			json.Unmarshal(b, &body) != nil || body.Success == nil || *body.Success || body.Code != tc.code || body.Message == "" {
			t.Errorf("%s %s: %d %s %s; want %d JSON %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status, tc.code)
		}
	}
	resp, err := http.Get(s.URL + "/admin/ui/static/README.md")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("an asset that exists: %d", resp.StatusCode)
	}
}
