package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/display"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// pooledResource makes a resource of 10,000 tokens cut 60/30/10 with
// lines core (CORE, weight 3: 2,250 dedicated, may borrow 1,125) and
// explore (EXPLORE, weight 1: 750), 2,000 applied on core, a grant of 700
// for explore, and (planted in the ledger: the controller makes them only
// under load) a WARNED reclaim from explore to core and two pool events.
func pooledResource(t *testing.T, s *testenv.Server, c *client.Client) (res, grantID string) {
	t.Helper()
	ctx := context.Background()
	res = testenv.Resource(t)
	set := client.DefaultPoolSettings()
	set.Elasticity = "OFF"
	if _, err := c.PutPolicy(ctx, client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 10000, Pools: &set}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		name string
		spec client.LineSpec
	}{{"core", client.LineSpec{Tier: "CORE", Weight: 3}}, {"explore", client.LineSpec{Tier: "EXPLORE", Weight: 1}}} {
		if _, err := c.PutLine(ctx, res, l.name, l.spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Apply(ctx, client.ApplyRequest{ResourceName: res, ApplyAmount: 2000, ClientID: "svc", BusinessLine: "core"}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(2 * time.Hour)
	g, err := c.GrantQuota(ctx, res, client.GrantRequest{Amount: 700, BusinessLine: "explore", ExpiresAt: &until, Reason: "launch <b>day</b>"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, id := range []string{res + "-r1", res + "-r2"} {
		if _, err := s.Ledger.Exec(`INSERT INTO quota_reclaim (id, resource_name, from_line, to_line, amount, state,
			dry_run, warned_ms, updated_ms, reason) VALUES (?, ?, 'explore', 'core', 300, 'WARNED', 0, ?, ?, 'core refused 12 times')`,
			id, res, now, now); err != nil {
			t.Fatal(err)
		}
	}
	for i, kind := range []string{"RECLAIM_WARNED", "WATERMARK_RAISED"} {
		if _, err := s.Ledger.Exec(`INSERT INTO quota_pool_event (resource_name, at_ms, kind, line, amount, reason)
			VALUES (?, ?, ?, 'explore', ?, 'shared pool 92 % full')`, res, now+int64(i), kind, 300+i); err != nil {
			t.Fatal(err)
		}
	}
	return res, g.ID
}

// The pools page in Chromium: the layout and lines, refreshed live; a
// reclaim confirmed after its warning; a grant voided.
func TestConsolePoolsInChromium(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-dana:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res, grantID := pooledResource(t, s, c)
	ctx := browser(t)
	ui := s.URL + "/admin/ui"
	run(t, ctx, "sign in",
		chromedp.Navigate(ui+"/"), chromedp.WaitVisible(`#token`), chromedp.SendKeys(`#token`, adminToken),
		chromedp.Submit(`#login`), chromedp.WaitVisible(`tr[data-resource="`+res+`"]`),
		chromedp.Navigate(ui+"/resources/"+res), chromedp.WaitVisible(`#pools-tab`), chromedp.Click(`#pools-tab`), chromedp.WaitVisible(`#lines`))
	core := liveText(t, ctx, "core", `tr[data-line="core"]`)
	if !strings.Contains(core, "CORE") || !strings.Contains(core, "2,250 tokens") || !strings.Contains(core, "2,000 tokens") || !strings.Contains(core, "95 %") {
		t.Fatalf("core line %q", core)
	}
	// A second apply borrows from the shared pool; the page shows it without a reload.
	if _, err := c.Apply(context.Background(), client.ApplyRequest{ResourceName: res, ApplyAmount: 1000, ClientID: "svc", BusinessLine: "core"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for core = liveText(t, ctx, "core", `tr[data-line="core"]`); !strings.Contains(core, "750 tokens / 1,125 tokens"); core = liveText(t, ctx, "core", `tr[data-line="core"]`) {
		if time.Now().After(deadline) {
			t.Fatalf("the core line never showed what it borrowed: %q", core)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if txt := liveText(t, ctx, "shared", `#shared`); !strings.HasPrefix(txt, "750 tokens of 6,000 tokens") {
		t.Fatalf("shared pool %q", txt)
	}
	if txt := liveText(t, ctx, "events", `#events`); !strings.Contains(txt, "WATERMARK_RAISED") || !strings.Contains(txt, "RECLAIM_WARNED") {
		t.Fatalf("events %q", txt)
	}
	if txt := liveText(t, ctx, "grants", `tr[data-grant="`+grantID+`"]`); !strings.Contains(txt, "launch <b>day</b>") || !strings.Contains(txt, "active") {
		t.Fatalf("grant row %q", txt)
	}
	form := `#reclaim-` + res + `-r1`
	if txt := liveText(t, ctx, "warning", form+` .warning`); !strings.Contains(txt, "300 tokens of explore's dedicated part moves to core") {
		t.Fatalf("reclaim warning %q", txt)
	}
	shot(t, ctx, "pools")

	run(t, ctx, "confirm the reclaim",
		chromedp.SendKeys(form+` input[name=reason]`, "agreed with explore"), chromedp.Click(form+` input[name=confirm]`),
		chromedp.Click(form+` button:not(.danger)`), chromedp.WaitVisible(`#flash`))
	if txt := liveText(t, ctx, "flash", `#flash`); !strings.Contains(txt, "CONFIRMED") {
		t.Fatalf("after confirming: %q", txt)
	}
	if txt := liveText(t, ctx, "reclaim row", `tr[data-reclaim="`+res+`-r1"]`); !strings.Contains(txt, "CONFIRMED") {
		t.Fatalf("reclaim row %q", txt)
	}
	vf := `tr[data-grant="` + grantID + `"] form`
	run(t, ctx, "void the grant",
		chromedp.Click(`tr[data-grant="`+grantID+`"] summary`), chromedp.WaitVisible(vf+` input[name=reason]`),
		chromedp.SendKeys(vf+` input[name=reason]`, "launch moved"), chromedp.Click(vf+` input[name=confirm]`),
		chromedp.Submit(vf))
	// #flash is still on the page from the confirmation until the void's
	// answer replaces it: wait for the void itself, with a deadline.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		gs, err := c.Grants(context.Background(), res)
		if err == nil && len(gs) == 1 && gs[0].VoidedAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grants after voiding: %+v, %v", gs, err)
		}
	}
	if get(t, ctx, "markup", chromedp.Evaluate[bool](`document.querySelector('#grants b') !== null`)) {
		t.Fatal("markup from a grant's reason became part of the page")
	}

	// The audit log filtered by who and what: the confirmation alone.
	run(t, ctx, "audit filters", chromedp.Navigate(ui+"/audit?resource="+res), chromedp.WaitVisible(`#audit-filters`),
		chromedp.SendKeys(`#audit-actor`, "ops-dana"), chromedp.SetValue(`#audit-action`, "reclaim.confirm"),
		chromedp.Submit(`#audit-filters`), chromedp.WaitVisible(`#audit`))
	rows := get(t, ctx, "audit rows", chromedp.Evaluate[int](`document.querySelectorAll('#audit tbody tr[data-id]').length`))
	text := get(t, ctx, "audit row", chromedp.Text(`#audit tbody tr:first-child`))
	if rows != 1 || !strings.Contains(text, "reclaim.confirm") || !strings.Contains(text, "agreed with explore") {
		t.Fatalf("audit by ops-dana of reclaim.confirm: %d rows, first %q", rows, text)
	}
	shot(t, ctx, "audit-filters")
	run(t, ctx, "bad action", chromedp.Navigate(ui+"/audit?action=Policy%20Put"), chromedp.WaitVisible(`#error`))
	if text = get(t, ctx, "error", chromedp.Text(`#error`)); !strings.Contains(text, "action") {
		t.Fatalf("a bad action filter: %q", text)
	}
}

// The Pools tab's "Pool settings" form in Chromium: refused when the
// shares do not sum to 100 (nothing changes), then the shares 60/30/10 →
// 50/40/10 and the borrowing limit 50 → 120 %, shown at once and audited.
func TestConsolePoolSettingsInChromium(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-gus:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := pooledResource(t, s, c)
	ctx := browser(t)
	ui := s.URL + "/admin/ui"
	run(t, ctx, "sign in", chromedp.Navigate(ui+"/"), chromedp.WaitVisible(`#token`), chromedp.SendKeys(`#token`, adminToken),
		chromedp.Submit(`#login`), chromedp.WaitVisible(`tr[data-resource="`+res+`"]`))
	before, err := c.Pools(context.Background(), res)
	if err != nil {
		t.Fatal(err)
	}
	set := `#pool-settings`
	fill := func(buffer string, then ...chromedp.Action[chromedp.Void]) []chromedp.Action[chromedp.Void] {
		return append([]chromedp.Action[chromedp.Void]{
			chromedp.Navigate(ui + "/resources/" + res + "/pools"), chromedp.WaitVisible(`#lines`),
			chromedp.Click(`#pool-settings-box summary`), chromedp.WaitVisible(set + ` input[name=borrow]`),
			chromedp.SetValue(set+` input[name=shared]`, "50"), chromedp.SetValue(set+` input[name=dedicated]`, "40"),
			chromedp.SetValue(set+` input[name=buffer]`, buffer), chromedp.SetValue(set+` input[name=borrow]`, "120"),
			chromedp.SendKeys(set+` input[name=reason]`, "core grows"), chromedp.Click(set + ` input[name=confirm]`)}, then...)
	}
	run(t, ctx, "pool settings not summing to 100", fill("20", chromedp.Click(set+` button`), chromedp.WaitVisible(`#error`))...)
	if txt := get(t, ctx, "error", chromedp.Text(`#error`)); !strings.Contains(txt, "nothing was changed") || !strings.Contains(txt, "100") {
		t.Fatalf("shares summing to 110: %q", txt)
	}
	if p, err := c.Pools(context.Background(), res); err != nil || p.Pools != before.Pools {
		t.Fatalf("a refused settings form changed them: %+v, %v (was %+v)", p.Pools, err, before.Pools)
	}
	run(t, ctx, "pool settings", fill("10")...)
	shot(t, ctx, "pool-settings")
	run(t, ctx, "save the pool settings", chromedp.Click(set+` button`), chromedp.WaitVisible(`#flash`))
	if txt := get(t, ctx, "flash", chromedp.Text(`#flash`)); !strings.Contains(txt, "Pool settings changed") {
		t.Fatalf("after saving the settings: %q", txt)
	}
	if txt := get(t, ctx, "dedicated", chromedp.Text(`#dedicated`)); txt != "4,000 tokens (40 %)" {
		t.Fatalf("dedicated pool after the change: %q", txt)
	}
	if txt := get(t, ctx, "borrowing limit", chromedp.Text(`#borrow-limit`)); !strings.HasPrefix(txt, "120 %") {
		t.Fatalf("borrowing limit after the change: %q", txt)
	}
	if p, err := c.Pools(context.Background(), res); err != nil || p.Pools.SharedPercent != 50 || p.Pools.DedicatedPercent != 40 ||
		p.Pools.BufferPercent != 10 || p.Pools.BorrowLimitPercent != 120 || p.Pools.Elasticity != before.Pools.Elasticity {
		t.Fatalf("settings after the change: %+v, %v", p.Pools, err)
	}

	run(t, ctx, "audit of the settings", chromedp.Navigate(ui+"/audit?resource="+res+"&action=pools.put"), chromedp.WaitVisible(`#audit`))
	if text := get(t, ctx, "audit row", chromedp.Text(`#audit tbody tr:first-child`)); !strings.Contains(text, "ops-gus") || !strings.Contains(text, "core grows") {
		t.Fatalf("audit of the pool settings: %q", text)
	}
}

// The pools page's actions refuse what is not confirmed, has no reason or
// no CSRF token, or meets the wrong state, and change nothing.
func TestConsolePoolsActionsRefused(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-erin:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res, grantID := pooledResource(t, s, c)
	ui := s.URL + "/admin/ui"
	post, page, csrf := signedIn(t, ui, "/resources/"+res+"/pools")
	if !strings.Contains(page, `id="lines"`) {
		t.Fatal("no lines table on the pools page")
	}
	// Each line's "May use" is what the API's status answers (mayUse, the
	// figure its watermark is a fraction of), not a fixed slice.
	st, err := c.Status(context.Background(), res)
	if err != nil || st.Pools == nil || len(st.Pools.Lines) != 2 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	for _, l := range st.Pools.Lines {
		row := regexp.MustCompile(`(?s)<tr data-line="` + l.BusinessLine + `".*?</tr>`).FindString(page)
		want := `<td class="num">` + display.Amount("tokens", l.MayUse) + `</td>
  <td class="num watermark">`
		if !strings.Contains(row, want) {
			t.Errorf("line %s: may use %d not shown: %s", l.BusinessLine, l.MayUse, row)
		}
	}
	ok := url.Values{"reason": {"r"}, "confirm": {"yes"}, "csrf": {csrf}}
	r1, r2 := "/resources/"+res+"/reclaims/"+res+"-r1/", "/resources/"+res+"/reclaims/"+res+"-r2/"
	for _, tc := range []struct {
		path string
		form url.Values
		want int
	}{
		{"/resources/" + res + "/grants/" + grantID + "/void", url.Values{"reason": {"r"}, "csrf": {csrf}}, http.StatusBadRequest},    // not confirmed
		{"/resources/" + res + "/grants/" + grantID + "/void", url.Values{"confirm": {"yes"}, "csrf": {csrf}}, http.StatusBadRequest}, // no reason
		{"/resources/" + res + "/grants/" + grantID + "/void", url.Values{"reason": {"r"}, "confirm": {"yes"}}, http.StatusForbidden}, // no CSRF
		{"/resources/" + res + "/grants/g-none/void", ok, http.StatusNotFound},
		{r1 + "confirm", url.Values{"reason": {"r"}, "csrf": {csrf}}, http.StatusBadRequest},
		{r1 + "bogus", ok, http.StatusNotFound},
		{"/resources/" + res + "/reclaims/r-none/cancel", ok, http.StatusNotFound},
		{"/resources/" + res + "-none/reclaims/r-none/cancel", ok, http.StatusNotFound},
	} {
		if code := post(tc.path, tc.form); code != tc.want {
			t.Errorf("POST %s %v: %d, want %d", tc.path, tc.form, code, tc.want)
		}
	}
	if gs, err := c.Grants(context.Background(), res); err != nil || len(gs) != 1 || gs[0].VoidedAt != nil {
		t.Fatalf("refused voids changed the grant: %+v, %v", gs, err)
	}
	if rs, err := c.Reclaims(context.Background(), res); err != nil || len(rs) != 2 || rs[0].State != "WARNED" || rs[1].State != "WARNED" {
		t.Fatalf("refused steps changed the reclaims: %+v, %v", rs, err)
	}
	// Cancelled once; a second cancel meets the wrong state (409).
	if code := post(r2+"cancel", ok); code != http.StatusSeeOther {
		t.Fatalf("cancel: %d", code)
	}
	if code := post(r2+"cancel", ok); code != http.StatusConflict {
		t.Errorf("cancel twice: %d, want 409", code)
	}
	// A resource without pools: the page says so.
	plain := testenv.Resource(t)
	if _, err := c.PutPolicy(context.Background(), client.PolicySpec{ResourceName: plain, QuotaType: "COUNT", TotalLimit: 5}); err != nil {
		t.Fatal(err)
	}
	if _, page, _ := signedIn(t, ui, "/resources/"+plain+"/pools"); !strings.Contains(page, `id="no-pools"`) {
		t.Fatalf("pools page of %s says nothing of its pools", plain)
	}
	if code := post("/resources/"+plain+"-none/reclaims/r/cancel", ok); code != http.StatusNotFound {
		t.Fatalf("a reclaim of an unknown resource: %d", code)
	}
}

// signedIn signs in to the console at ui over plain HTTP and reads the page
// at path (200 or the test fails). It returns a poster of forms (answering
// the status; redirects are not followed), the page and its CSRF token.
func signedIn(t *testing.T, ui, path string) (post func(path string, form url.Values) int, page, csrf string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post = func(path string, form url.Values) int {
		resp, err := hc.PostForm(ui+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/login", url.Values{"token": {adminToken}}); code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", code)
	}
	page, csrf = pageWithCSRF(t, hc, ui+path)
	return post, page, csrf
}

// pageWithCSRF reads a console page with hc (200 or the test fails) and
// returns it and its form's CSRF token.
func pageWithCSRF(t *testing.T, hc *http.Client, page string) (body, csrf string) {
	t.Helper()
	resp, err := hc.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindSubmatch(b)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("%s: %d, CSRF token found %v", page, resp.StatusCode, m != nil)
	}
	return string(b), string(m[1])
}
