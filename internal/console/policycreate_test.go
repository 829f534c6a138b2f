package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The resources page's "New policy" form creates a policy, audited as the
// signed-in admin; a bad field, a missing confirmation or reason, or no
// CSRF token creates nothing, and an existing name is refused (409), never
// replaced.
func TestConsoleCreatesAPolicy(t *testing.T) {
	s, c, taken := policyServer(t, "ops-fay", "TOKENS", 1000)
	ctx, res := context.Background(), testenv.Resource(t)
	post, page, csrf := signedIn(t, s.URL+"/admin/ui", "/resources")
	if !strings.Contains(page, `id="new-policy"`) || !strings.Contains(page, `name="type"`) {
		t.Fatal("no new-policy form on the resources page")
	}
	form := func(edit map[string]string) url.Values {
		return withEdits(url.Values{"name": {res}, "type": {"COUNT"}, "limit": {"5,000"}, "cron": {"0 0 * * *"},
			"timezone": {"Asia/Shanghai"}, "leak": {"90"}, "failmode": {"OPEN"}, "reason": {"new team"},
			"confirm": {"yes"}, "csrf": {csrf}}, edit)
	}
	for _, bad := range []map[string]string{
		{"name": "-"}, {"name": "Has Spaces"}, {"name": strings.Repeat("a", 65)}, {"type": "PAGES"}, {"type": "-"},
		{"limit": "0"}, {"limit": "lots"}, {"limit": "-"}, {"leak": "0"}, {"leak": "-"}, {"failmode": "MAYBE"},
		{"cron": "every day"}, {"timezone": "Mars/Olympus"}, {"confirm": "-"}, {"reason": " "},
	} {
		if code := post("/policies", form(bad)); code != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", bad, code)
		}
	}
	if code := post("/policies", form(map[string]string{"csrf": "-"})); code != http.StatusForbidden {
		t.Errorf("no CSRF token: %d, want 403", code)
	}
	if code := post("/policies", form(map[string]string{"csrf": strings.Repeat("0", 64)})); code != http.StatusForbidden {
		t.Errorf("a wrong CSRF token: %d, want 403", code)
	}
	if _, err := c.GetPolicy(ctx, res); !errors.Is(err, client.ErrResourceNotFound) {
		t.Fatalf("refused creates made a policy: %v", err)
	}
	if code := post("/policies", form(map[string]string{"name": taken})); code != http.StatusConflict {
		t.Errorf("an existing name: %d, want 409", code)
	}
	if p, err := c.GetPolicy(ctx, taken); err != nil || p.QuotaType != "TOKENS" || p.TotalLimit != 1000 || p.FailMode == "OPEN" {
		t.Fatalf("the existing policy was replaced: %+v, %v", p, err)
	}
	if code := post("/policies", form(nil)); code != http.StatusSeeOther {
		t.Fatalf("create: %d", code)
	}
	p, err := c.GetPolicy(ctx, res)
	if err != nil || p.QuotaType != "COUNT" || p.TotalLimit != 5000 || p.ResetCron != "0 0 * * *" ||
		p.Timezone != "Asia/Shanghai" || p.LeakThresholdSeconds != 90 || p.FailMode != "OPEN" {
		t.Fatalf("after the create: %+v, %v", p, err)
	}
	if code := post("/policies", form(map[string]string{"limit": "9"})); code != http.StatusConflict {
		t.Errorf("creating it again: %d, want 409", code)
	}
	a, err := c.Audit(ctx, client.AuditQuery{Resource: res})
	if err != nil || len(a) != 1 || a[0].Actor != "ops-fay" || a[0].Action != "policy.put" || a[0].Reason != "new team" {
		t.Fatalf("audit of %s: %+v, %v", res, a, err)
	}
}
