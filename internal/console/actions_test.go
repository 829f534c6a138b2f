package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// operator is a signed-in console session over plain HTTP: its client
// (cookie jar, redirects not followed) and the session's CSRF token.
type operator struct {
	t    *testing.T
	ui   string
	hc   *http.Client
	csrf string
}

// signIn signs in with adminToken and reads the CSRF token from res's page.
func signIn(t *testing.T, s *testenv.Server, res string) *operator {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	o := &operator{t: t, ui: s.URL + "/admin/ui",
		hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if code, _ := o.post("/login", url.Values{"token": {adminToken}}); code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", code)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(o.page("/resources/" + res))
	if m == nil {
		t.Fatal("no CSRF token on the resource page")
	}
	o.csrf = m[1]
	return o
}

// post sends a form (the CSRF token added unless form has one or is a
// sign-in) and returns the status and the body.
func (o *operator) post(path string, form url.Values) (int, string) {
	o.t.Helper()
	if o.csrf != "" && form.Get("csrf") == "" {
		form.Set("csrf", o.csrf)
	}
	resp, err := o.hc.PostForm(o.ui+path, form)
	if err != nil {
		o.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (o *operator) page(path string) string {
	o.t.Helper()
	resp, err := o.hc.Get(o.ui + path)
	if err != nil {
		o.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		o.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// Reset the period and force-finish a session from the console: refused
// (nothing changes) without the confirmation, a reason, a valid amount or
// the CSRF token; done and audited under the signed-in name otherwise.
// aSessionToChange starts a dev server whose admin token is named actor,
// with a TOKENS resource of 1000 and one session of client "batch" holding
// 300 of it, and signs in to the console.
func aSessionToChange(t *testing.T, actor string) (c *client.Client, res string, ap *client.ApplyResponse, o *operator) {
	t.Helper()
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", actor+":"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res = testenv.Resource(t)
	if _, err := c.PutPolicy(context.Background(), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 1000}); err != nil {
		t.Fatal(err)
	}
	ap, err = c.Apply(context.Background(), client.ApplyRequest{ResourceName: res, ApplyAmount: 300, ClientID: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	return c, res, ap, signIn(t, s, res)
}

func TestConsoleResetsAPeriodAndForceFinishesASession(t *testing.T) {
	c, res, ap, o := aSessionToChange(t, "ops-dave")
	ctx := context.Background()
	before, err := c.Status(ctx, res)
	if err != nil {
		t.Fatal(err)
	}

	finishPath := "/sessions/" + ap.SessionID + "/finish"
	for _, f := range []struct {
		path string
		form url.Values
		want int
	}{
		{"/resources/" + res + "/reset", url.Values{"reason": {"r"}}, http.StatusBadRequest},    // not confirmed
		{"/resources/" + res + "/reset", url.Values{"confirm": {"yes"}}, http.StatusBadRequest}, // no reason
		{"/resources/" + res + "/reset", url.Values{"confirm": {"yes"}, "reason": {"r"}, "csrf": {strings.Repeat("0", 64)}}, http.StatusForbidden},
		{finishPath, url.Values{"resource": {res}, "amount": {"-1"}, "reason": {"r"}, "confirm": {"yes"}}, http.StatusBadRequest},
		{finishPath, url.Values{"resource": {res}, "amount": {"lots"}, "reason": {"r"}, "confirm": {"yes"}}, http.StatusBadRequest},
		{finishPath, url.Values{"resource": {res}, "reason": {"r"}}, http.StatusBadRequest},
		{finishPath, url.Values{"resource": {res}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {strings.Repeat("0", 64)}}, http.StatusForbidden},
		{"/sessions/no-such-session/finish", url.Values{"resource": {res}, "reason": {"r"}, "confirm": {"yes"}}, http.StatusNotFound},
	} {
		if code, body := o.post(f.path, f.form); code != f.want {
			t.Errorf("%s %v: %d, want %d\n%s", f.path, f.form, code, f.want, body)
		}
	}
	after, err := c.Status(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if !after.PeriodStart.Equal(before.PeriodStart) || after.ReservedAmount != 300 || after.ActiveSessions != 1 {
		t.Fatalf("refused actions changed something: before %+v, after %+v", before, after)
	}

	// Finish the session with 120 used: 180 refunded, in the ledger and the audit log.
	if code, body := o.post(finishPath, url.Values{"resource": {res}, "amount": {"120"}, "reason": {"client crashed"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("force-finish: %d %s", code, body)
	}
	after, err = c.Status(ctx, res)
	if err != nil || after.UsedAmount != 120 || after.ReservedAmount != 0 || after.ActiveSessions != 0 {
		t.Fatalf("after the force-finish: %+v, %v", after, err)
	}
	// Reset: a new period with nothing used.
	time.Sleep(5 * time.Millisecond) // the new period starts at a later millisecond
	if code, body := o.post("/resources/"+res+"/reset", url.Values{"reason": {"new budget"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("reset: %d %s", code, body)
	}
	after, err = c.Status(ctx, res)
	if err != nil || !after.PeriodStart.After(before.PeriodStart) || after.UsedAmount != 0 {
		t.Fatalf("after the reset: %+v, %v", after, err)
	}
	entries, err := c.Audit(ctx, client.AuditQuery{Resource: res, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]string{}
	for _, e := range entries {
		actions[e.Action] = e.Actor + ": " + e.Reason
	}
	if actions["policy.reset"] != "ops-dave: new budget" || actions["session.finish"] != "ops-dave: client crashed" {
		t.Fatalf("audit %v: want the reset and the finish under ops-dave with their reasons", actions)
	}
}

// Release reserve from the console moves buffer into use for a resource
// with pools; refusals (no amount, an unknown line, no confirmation)
// release nothing.
func TestConsoleReleasesReserve(t *testing.T) {
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", "ops-erin:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res := testenv.Resource(t)
	if _, err := c.PutPolicy(ctx, client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 10000}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, s.URL+"/admin/policies/"+res+"/lines/search", strings.NewReader(`{"tier":"CORE","weight":1}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		t.Fatalf("put line: %d", resp.StatusCode)
	}
	o := signIn(t, s, res)
	grants := func() []client.GrantRecord { return listGrants(t, s, res) }
	for _, f := range []url.Values{
		{"reason": {"promo"}, "confirm": {"yes"}},                                                       // no amount
		{"amount": {"200"}, "reason": {"promo"}},                                                        // not confirmed
		{"amount": {"200"}, "line": {"nope"}, "reason": {"promo"}, "confirm": {"yes"}},                  // unknown line
		{"amount": {"200"}, "until": {"tomorrow"}, "reason": {"promo"}, "confirm": {"yes"}},             // bad time
		{"amount": {"200"}, "reason": {"promo"}, "confirm": {"yes"}, "csrf": {strings.Repeat("1", 64)}}, // wrong CSRF
	} {
		if code, body := o.post("/resources/"+res+"/release", f); code < 400 || code > 499 {
			t.Errorf("release %v: %d, want a 4xx\n%s", f, code, body)
		}
	}
	if gs := grants(); len(gs) != 0 {
		t.Fatalf("refused releases released: %+v", gs)
	}
	if code, body := o.post("/resources/"+res+"/release", url.Values{"amount": {"200"}, "line": {"search"}, "reason": {"promo"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("release: %d %s", code, body)
	}
	gs := grants()
	if len(gs) != 1 || gs[0].Kind != "RELEASE" || gs[0].Amount != 200 || gs[0].BusinessLine != "search" || gs[0].Reason != "promo" {
		t.Fatalf("grants after the release: %+v", gs)
	}
}

// listGrants reads res's temporary grants and releases through the API.
func listGrants(t *testing.T, s *testenv.Server, res string) []client.GrantRecord {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/admin/policies/"+res+"/grants", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Grants []client.GrantRecord `json:"grants"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Grants
}
