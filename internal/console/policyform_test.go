package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The resource page's "Edit the policy" form changes every setting at
// once; a bad field (limit, leak threshold, fail mode, cron, time zone) or
// a missing confirmation or reason is refused and changes nothing.
func TestConsoleEditsAPolicy(t *testing.T) {
	s, c, res := policyServer(t, "ops-fay", "TOKENS", 1000)
	post, page, csrf := signedIn(t, s.URL+"/admin/ui", "/resources/"+res)
	if !strings.Contains(page, `id="edit-policy"`) || !strings.Contains(page, `name="leak"`) {
		t.Fatal("no policy form on the resource page")
	}
	form := func(edit map[string]string) url.Values {
		return withEdits(url.Values{"limit": {"2,000"}, "cron": {"0 0 * * *"}, "timezone": {"Asia/Shanghai"},
			"leak": {"120"}, "failmode": {"OPEN"}, "reason": {"new budget"}, "confirm": {"yes"}, "csrf": {csrf}}, edit)
	}
	path := "/resources/" + res + "/policy"
	for _, bad := range []map[string]string{
		{"limit": "0"}, {"limit": "lots"}, {"leak": "-5"}, {"leak": "-"}, {"failmode": "MAYBE"},
		{"cron": "every day"}, {"timezone": "Mars/Olympus"}, {"confirm": "-"}, {"reason": " "},
	} {
		if code := post(path, form(bad)); code != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", bad, code)
		}
	}
	if code := post(path, form(map[string]string{"csrf": "-"})); code != http.StatusForbidden {
		t.Errorf("no CSRF token: %d, want 403", code)
	}
	if p, err := c.GetPolicy(context.Background(), res); err != nil || p.TotalLimit != 1000 || p.ResetCron != "" || p.FailMode == "OPEN" {
		t.Fatalf("refused edits changed the policy: %+v, %v", p, err)
	}
	if code := post(path, form(nil)); code != http.StatusSeeOther {
		t.Fatalf("edit: %d", code)
	}
	p, err := c.GetPolicy(context.Background(), res)
	if err != nil || p.TotalLimit != 2000 || p.ResetCron != "0 0 * * *" || p.Timezone != "Asia/Shanghai" ||
		p.LeakThresholdSeconds != 120 || p.FailMode != "OPEN" {
		t.Fatalf("after the edit: %+v, %v", p, err)
	}
}

// policyServer starts a dev server whose admin token signs in as actor,
// with a policy of quota type qt and limit for the returned resource.
func policyServer(t *testing.T, actor string, qt client.QuotaType, limit int64) (*testenv.Server, *client.Client, string) {
	t.Helper()
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", actor+":"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	res := testenv.Resource(t)
	if _, err := c.PutPolicy(context.Background(), client.PolicySpec{ResourceName: res, QuotaType: qt, TotalLimit: limit}); err != nil {
		t.Fatal(err)
	}
	return s, c, res
}

// withEdits changes a form: each edit sets a field, or removes it when
// its value is "-".
func withEdits(v url.Values, edit map[string]string) url.Values {
	for k, x := range edit {
		if x == "-" {
			v.Del(k)
		} else {
			v.Set(k, x)
		}
	}
	return v
}
