package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// exposes reports whether s's /metrics has exactly this sample line.
func exposes(t *testing.T, s *testenv.Server, line string) bool {
	t.Helper()
	return strings.Contains("\n"+scrape(t, s), "\n"+line+"\n")
}

// The sweeper's and reconciler's per-resource counters exist at 0 for every
// used resource before their first event, so increase() sees that event.
func TestLoopCountersStartAtZeroForEveryPolicy(t *testing.T) {
	s := testenv.Start(t, testenv.Dev, "--reconcile-interval", "200ms")
	res := testenv.Resource(t)
	if !exposes(t, s, `quota_reconcile_runs_total{result="error"} 0`) {
		t.Error("quota_reconcile_runs_total{result=error} does not start at 0")
	}
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10})
	// Series exist for the used resources (issue 23 §1): one apply.
	if code, out, _ := call(t, s, "POST", "/quota/apply", map[string]any{"resourceName": res, "clientId": "c", "applyAmount": 1}); code != 200 {
		t.Fatalf("apply: %d %v", code, out)
	}
	for _, line := range []string{
		`quota_sessions_leaked_total{resource="` + res + `"} 0`,
		`quota_reconcile_repairs_total{kind="ledger_settled",resource="` + res + `"} 0`,
		`quota_reconcile_repairs_total{kind="fail_open_recorded",resource="` + res + `"} 0`,
	} {
		testenv.Eventually(t, 10*time.Second, line, func() bool { return exposes(t, s, line) })
	}
}

// A resource created and used through one instance gets its series at 0
// on the other instance too (its sweep pass lists the used resources,
// every instance's), before any request reaches that instance.
func TestPolicyFromAnotherInstanceGetsZeroSeries(t *testing.T) {
	a, b := twoInstances(t, testenv.Real)
	res := sharedResource(t)
	putPolicy(t, a, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 100, "failMode": "OPEN"})
	if code, out, _ := call(t, a, "POST", "/quota/apply", map[string]any{"resourceName": res, "clientId": "c", "applyAmount": 1}); code != 200 {
		t.Fatalf("apply on a: %d %v", code, out)
	}
	for _, line := range []string{
		`quota_fail_open_grants_total{resource="` + res + `"} 0`,
		`quota_heartbeat_total{resource="` + res + `",result="ok"} 0`,
		`quota_sessions_leaked_total{resource="` + res + `"} 0`,
	} {
		testenv.Eventually(t, 10*time.Second, "instance b: "+line, func() bool { return exposes(t, b, line) })
	}
}
