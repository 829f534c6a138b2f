package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The console end to end in Debian's headless Chromium (driven by chromedp):
// sign in, see a resource, see a live session appear, change a limit, see
// the audit entry; everything shown is escaped. QC_CONSOLE_SCREENSHOTS=dir
// also saves a screenshot of each page there (docs/console.md shows them).

const adminToken = "console-test-admin-0123456789"

// chromium returns the browser's path; without one the test fails when
// backends are required (CI installs it in .ci/run) and skips otherwise.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("QC_TEST_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := "no Chromium: apt-get install chromium chromium-driver (or set QC_TEST_CHROMIUM)"
	if testenv.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// liveText is the innerText of the first element sel matches ("" when
// none), read in one evaluation: a page that re-renders live (the pools
// tab, the figures) can replace the element between chromedp.Text's query
// and its read ("No node with given id found").
// Like chromedp.Text it waits for the element (up to 15 s).
func liveText(t *testing.T, ctx context.Context, what, sel string) string {
	t.Helper()
	read := chromedp.Evaluate[string](`(document.querySelector(` + strconv.Quote(sel) + `) || {}).innerText || ""`)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if txt := get(t, ctx, what, read); txt != "" || time.Now().After(deadline) {
			return txt
		}
	}
}

// shot saves a full-page screenshot as dir/name.png when
// QC_CONSOLE_SCREENSHOTS is set.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("QC_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestConsoleInChromium(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-alice:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res := testenv.Resource(t)
	if _, err := c.PutPolicy(context.Background(), client.PolicySpec{ResourceName: res, QuotaType: "DURATION",
		TotalLimit: 18000, ResetCron: "0 0 * * *"}); err != nil {
		t.Fatal(err)
	}
	// A ledger row whose client id holds markup (the API refuses such ids
	// today; rows written before the rule, or by hand, may hold anything).
	const evilClient = `<img src=x onerror="window.__xss=1">`
	if _, err := s.Ledger.Exec(`INSERT INTO quota_usage (resource_name, client_id, session_id, period_start_ms,
		granted_amount, charged_amount, start_ms, end_ms, status) VALUES (?, ?, ?, ?, 60, 30, ?, ?, 'FINISHED')`,
		res, evilClient, "evil-"+testenv.RandomSuffix(), time.Now().UnixMilli()-1000, time.Now().UnixMilli()-1000, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	ui := s.URL + "/admin/ui"

	// Sign in: a wrong token is refused, the right one lands on the resources.
	run(t, ctx, "wrong token",
		chromedp.Navigate(ui+"/"), chromedp.WaitVisible(`#login`),
		chromedp.SendKeys(`#token`, "not-the-token-0123456789"), chromedp.Submit(`#login`),
		chromedp.WaitVisible(`#error`))
	text := get(t, ctx, "error", chromedp.Text(`#error`))
	if !strings.Contains(text, "not valid") {
		t.Fatalf("wrong token: %q", text)
	}
	shot(t, ctx, "login")
	run(t, ctx, "sign in",
		chromedp.WaitVisible(`#token`), chromedp.SendKeys(`#token`, adminToken), chromedp.Submit(`#login`),
		chromedp.WaitVisible(`tr[data-resource="`+res+`"]`))
	text = get(t, ctx, "actor", chromedp.Text(`#actor`))
	if text != "ops-alice" {
		t.Fatalf("signed in as %q", text)
	}
	text = get(t, ctx, "resource row", chromedp.Text(`tr[data-resource="`+res+`"]`))
	if !strings.Contains(text, "5:00:00") || !strings.Contains(text, "100%") {
		t.Fatalf("resource row %q: want the limit as h:mm:ss and 100%% remaining", text)
	}
	shot(t, ctx, "resources")

	// The session map: a session applied for now appears without a reload.
	run(t, ctx, "resource page", chromedp.Navigate(ui+"/resources/"+res), chromedp.WaitVisible(`#sessions`))
	ap, err := c.Apply(context.Background(), client.ApplyRequest{ResourceName: res, ApplyAmount: 5400, ClientID: "report-svc"})
	if err != nil {
		t.Fatal(err)
	}
	row := `tr[data-session="` + ap.SessionID + `"]`
	run(t, ctx, "live session appears", chromedp.WaitVisible(row))
	text = get(t, ctx, "live session", chromedp.Text(row))
	if !strings.Contains(text, "report-svc") || !strings.Contains(text, "USING") || !strings.Contains(text, "1:30:00") {
		t.Fatalf("live session row %q", text)
	}
	// The figures follow too: 1:30:00 reserved, 3:30:00 remaining.
	deadline := time.Now().Add(30 * time.Second)
	for text = liveText(t, ctx, "figures", `#figures`); !strings.Contains(text, "3:30:00"); text = liveText(t, ctx, "figures", `#figures`) {
		if time.Now().After(deadline) {
			t.Fatalf("figures never showed the session: %q", text)
		}
		time.Sleep(200 * time.Millisecond)
	}
	shot(t, ctx, "resource")

	// Change the limit, with a reason holding markup.
	const evilReason = `more <script>window.__xss=2</script><b>budget</b>`
	run(t, ctx, "change the limit",
		chromedp.Click(`#actions > summary`), chromedp.WaitVisible(`#new-limit`))
	shot(t, ctx, "actions")
	run(t, ctx, "change the limit",
		chromedp.SetValue(`#new-limit`, "21600"),
		chromedp.SendKeys(`#change-limit input[name=reason]`, evilReason),
		chromedp.Click(`#change-limit input[name=confirm]`), chromedp.Submit(`#change-limit`),
		chromedp.WaitVisible(`#flash`))
	text = get(t, ctx, "limit", chromedp.Text(`#limit`))
	if text != "6:00:00" {
		t.Fatalf("limit after the change: %q", text)
	}
	if p, err := c.GetPolicy(context.Background(), res); err != nil || p.TotalLimit != 21600 {
		t.Fatalf("policy after the change: %+v, %v", p, err)
	}

	// The audit entry, its reason shown as text.
	run(t, ctx, "audit", chromedp.Navigate(ui+"/audit?resource="+res), chromedp.WaitVisible(`#audit`))
	text = get(t, ctx, "audit row", chromedp.Text(`#audit tbody tr:first-child`))
	if !strings.Contains(text, "ops-alice") || !strings.Contains(text, "policy.put") || !strings.Contains(text, evilReason) {
		t.Fatalf("audit row %q", text)
	}
	shot(t, ctx, "audit")
	if get(t, ctx, "audit markup", chromedp.Evaluate[bool](`window.__xss !== undefined || document.querySelector('#audit script, #audit b') !== null`)) {
		t.Fatal("markup from a reason became part of the audit page")
	}

	// The markup stayed text everywhere: the sessions' history and the usage page.
	run(t, ctx, "history", chromedp.Navigate(ui+"/resources/"+res+"?status=FINISHED"), chromedp.WaitVisible(`#sessions`))
	text = get(t, ctx, "history", chromedp.Text(`#sessions tbody`))
	if !strings.Contains(text, evilClient) {
		t.Fatalf("history %q: want the client id shown as text", text)
	}
	run(t, ctx, "usage", chromedp.Navigate(ui+"/resources/"+res+"/usage"), chromedp.WaitVisible(`#by-client`),
		chromedp.WaitVisible(`#usage-chart canvas`))
	text = get(t, ctx, "usage by client", chromedp.Text(`#by-client`))
	if !strings.Contains(text, evilClient) || !strings.Contains(text, "report-svc") {
		t.Fatalf("usage by client %q", text)
	}
	shot(t, ctx, "usage")
	injected := get(t, ctx, "nothing ran", chromedp.Evaluate[bool](`window.__xss !== undefined || document.querySelector('#by-client img, #sessions img') !== null`))
	if injected {
		t.Fatal("markup from a client id became part of the usage page")
	}

	// Create a policy from the resources page; it is listed at once.
	fresh := testenv.Resource(t)
	run(t, ctx, "new policy form", chromedp.Navigate(ui+"/resources"), chromedp.WaitVisible(`#resources`),
		chromedp.Click(`#new-policy-box > summary`), chromedp.WaitVisible(`#new-name`),
		chromedp.SendKeys(`#new-name`, fresh), chromedp.SetValue(`#new-type`, "COUNT"),
		chromedp.SendKeys(`#create-limit`, "2,500"), chromedp.SendKeys(`#new-policy input[name=cron]`, "0 0 * * *"),
		chromedp.SendKeys(`#new-policy input[name=reason]`, "a new team"),
		chromedp.Click(`#new-policy input[name=confirm]`))
	shot(t, ctx, "new-policy")
	run(t, ctx, "create the policy", chromedp.Submit(`#new-policy`), chromedp.WaitVisible(`#flash`))
	if text = get(t, ctx, "created", chromedp.Text(`#flash`)); !strings.Contains(text, "created") {
		t.Fatalf("flash after the create: %q", text)
	}
	run(t, ctx, "listed", chromedp.Navigate(ui+"/resources"), chromedp.WaitVisible(`tr[data-resource="`+fresh+`"]`))
	if text = get(t, ctx, "new row", chromedp.Text(`tr[data-resource="`+fresh+`"]`)); !strings.Contains(text, "COUNT") || !strings.Contains(text, "2,500") {
		t.Fatalf("new resource row %q", text)
	}
	if p, err := c.GetPolicy(context.Background(), fresh); err != nil || p.QuotaType != "COUNT" || p.TotalLimit != 2500 || p.ResetCron != "0 0 * * *" {
		t.Fatalf("created policy: %+v, %v", p, err)
	}
}

// Changes need a session and the session's CSRF token; refused ones change
// nothing. (Plain HTTP: this is about the server, not the browser.)
func TestConsoleRefusesChangesWithoutSessionOrCSRF(t *testing.T) {
	s, c, res := policyServer(t, "ops-bob", "COUNT", 100)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ui := s.URL + "/admin/ui"
	post := func(path string, form url.Values, h map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, ui+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	change := url.Values{"limit": {"5"}, "reason": {"r"}, "confirm": {"yes"}}
	limitPath := "/resources/" + res + "/limit"

	if code, _ := post(limitPath, change, nil); code != http.StatusUnauthorized {
		t.Errorf("no session: %d, want 401", code)
	}
	if code, _ := post("/login", url.Values{"token": {"wrong-0123456789abcdef"}}, nil); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, _ := post("/login", url.Values{"token": {adminToken}}, map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("sign-in from another origin: %d, want 403", code)
	}
	code, _ := post("/login", url.Values{"token": {adminToken}}, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", code)
	}
	u, _ := url.Parse(ui + "/")
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "qc_console" && (len(ck.Value) != 64) {
			t.Errorf("session cookie %q", ck.Value)
		}
	}
	if code, body := post(limitPath, change, nil); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("no CSRF token: %d, want 403 naming CSRF", code)
	}
	bad := url.Values{"limit": {"5"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {strings.Repeat("0", 64)}}
	if code, _ := post(limitPath, bad, nil); code != http.StatusForbidden {
		t.Errorf("wrong CSRF token: %d, want 403", code)
	}
	// The right token, from the page.
	resp, err := hc.Get(ui + "/resources/" + res)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the resource page")
	}
	csrf := string(m[1])
	good := url.Values{"limit": {"5"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {csrf}}
	if code, _ := post(limitPath, good, map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("right token from another origin: %d, want 403", code)
	}
	for _, f := range []url.Values{
		{"limit": {"5"}, "reason": {"r"}, "csrf": {csrf}},                        // not confirmed
		{"limit": {"5"}, "confirm": {"yes"}, "csrf": {csrf}},                     // no reason
		{"limit": {"five"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {csrf}}, // not a number
	} {
		if code, _ := post(limitPath, f, nil); code != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", f, code)
		}
	}
	if p, err := c.GetPolicy(context.Background(), res); err != nil || p.TotalLimit != 100 {
		t.Fatalf("refused changes changed the policy: %+v, %v", p, err)
	}
	if code, _ := post(limitPath, good, nil); code != http.StatusSeeOther {
		t.Fatalf("a proper change: %d", code)
	}
	if p, _ := c.GetPolicy(context.Background(), res); p.TotalLimit != 5 {
		t.Fatalf("limit %d after the change, want 5", p.TotalLimit)
	}
	// Signed out, the old cookie is worth nothing.
	old := jar.Cookies(u)
	if code, _ := post("/logout", url.Values{"csrf": {csrf}}, nil); code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", code)
	}
	jar.SetCookies(u, old)
	if code, _ := post(limitPath, good, nil); code != http.StatusUnauthorized {
		t.Errorf("after sign-out: %d, want 401", code)
	}
	// A page is a redirect to the sign-in.
	resp, err = hc.Get(ui + "/resources")
	if err != nil && !errors.Is(err, http.ErrUseLastResponse) {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther && resp.StatusCode != http.StatusFound || !strings.HasSuffix(resp.Header.Get("Location"), "/login") {
		t.Errorf("a page after sign-out: %d to %q, want a redirect to the sign-in", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// Temporary grants and reserve releases go through the pools' admin, with
// the same CSRF, confirmation and reason rules as every change.
func TestConsoleGrantsTemporaryQuota(t *testing.T) {
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", "ops-carol:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res := testenv.Resource(t)
	if _, err := c.PutPolicy(context.Background(), client.PolicySpec{ResourceName: res, QuotaType: "TOKENS", TotalLimit: 1000}); err != nil {
		t.Fatal(err)
	}
	post, page, csrf := signedIn(t, s.URL+"/admin/ui", "/resources/"+res)
	if !strings.Contains(page, `id="grant"`) {
		t.Fatal("no grant form on the resource page")
	}
	until := time.Now().UTC().Add(2 * time.Hour).Format("2006-01-02T15:04")
	grant := url.Values{"amount": {"500"}, "until": {until}, "reason": {"launch day"}, "confirm": {"yes"}, "csrf": {csrf}}
	noCSRF := url.Values{"amount": {"500"}, "until": {until}, "reason": {"x"}, "confirm": {"yes"}}
	if code := post("/resources/"+res+"/grant", noCSRF); code != http.StatusForbidden {
		t.Errorf("grant without CSRF: %d, want 403", code)
	}
	if code := post("/resources/"+res+"/release", url.Values{"amount": {"5"}, "reason": {"x"}, "confirm": {"yes"}, "csrf": {csrf}}); code < 400 || code > 499 {
		t.Errorf("release without a buffer: %d, want a 4xx", code)
	}
	if g := listGrants(t, s, res); len(g) != 0 {
		t.Fatalf("refused changes made a grant: %+v", g)
	}
	if code := post("/resources/"+res+"/grant", grant); code != http.StatusSeeOther {
		t.Fatalf("grant: %d", code)
	}
	if g := listGrants(t, s, res); len(g) != 1 || g[0].Amount != 500 || g[0].Kind != "GRANT" || g[0].Reason != "launch day" {
		t.Fatalf("grants after the console's grant: %+v", g)
	}
}
