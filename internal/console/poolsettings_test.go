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

// The Pools tab's "Pool settings" form replaces the settings, audited as
// the signed-in admin; a bad number, shares not summing to 100, an unknown
// elasticity, a missing confirmation or reason, or no CSRF token changes
// nothing.
func TestConsoleEditsPoolSettings(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-gil:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, _ := pooledResource(t, s, c)
	before, err := c.Pools(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	post, page, csrf := signedIn(t, s.URL+"/admin/ui", "/resources/"+res+"/pools")
	if !strings.Contains(page, `id="pool-settings"`) || !strings.Contains(page, `name="borrow"`) {
		t.Fatal("no pool settings form on the pools page")
	}
	form := func(edit map[string]string) url.Values {
		return withEdits(url.Values{"shared": {"50"}, "dedicated": {"40"}, "buffer": {"10"}, "borrow": {"120"},
			"elasticity": {"OFF"}, "reclaimat": {"80"}, "confirmafter": {"0"}, "dryrun": {"yes"},
			"reason": {"rebalance"}, "confirm": {"yes"}, "csrf": {csrf}}, edit)
	}
	path := "/resources/" + res + "/pools"
	for _, bad := range []map[string]string{
		{"shared": "-"}, {"shared": "fifty"}, {"shared": "-5"}, {"buffer": "20"}, {"dedicated": "1.5"},
		{"borrow": "1001"}, {"borrow": "-"}, {"elasticity": "SOMETIMES"}, {"reclaimat": "0"}, {"reclaimat": "101"},
		{"confirmafter": "86401"}, {"confirm": "-"}, {"reason": " "},
	} {
		if code := post(path, form(bad)); code != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", bad, code)
		}
	}
	if code := post(path, form(map[string]string{"csrf": "-"})); code != http.StatusForbidden {
		t.Errorf("no CSRF token: %d, want 403", code)
	}
	if p, err := c.Pools(ctx, res); err != nil || p.Pools != before.Pools {
		t.Fatalf("refused changes changed the settings: %+v (was %+v), %v", p, before, err)
	}
	if code := post(path, form(nil)); code != http.StatusSeeOther {
		t.Fatalf("change: %d", code)
	}
	p, err := c.Pools(ctx, res)
	want := client.PoolSettings{SharedPercent: 50, DedicatedPercent: 40, BufferPercent: 10, BorrowLimitPercent: 120,
		Elasticity: "OFF", ReclaimThresholdPercent: 80, ReclaimConfirmSeconds: 0, ReclaimDryRun: true}
	if err != nil || p.Pools != want {
		t.Fatalf("after the change: %+v, %v; want %+v", p.Pools, err, want)
	}
	a, err := c.Audit(ctx, client.AuditQuery{Resource: res, Actor: "ops-gil", Limit: 1})
	if err != nil || len(a) != 1 || a[0].Reason != "rebalance" || !strings.HasPrefix(a[0].Action, "pools") {
		t.Fatalf("audit: %+v, %v", a, err)
	}
}
