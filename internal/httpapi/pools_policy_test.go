package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestPolicyVersionChangesWithGrantsAndLines: apply and heartbeat answers
// carry a policyVersion that changes when a temporary grant is added or
// voided, a line is added or changed, the pool settings change or buffer is
// released (issue 12: the SDK's LocalPool refetches on a new version), and
// stays put otherwise.
func TestPolicyVersionChangesWithGrantsAndLines(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":100000}`)
	n := 0
	version := func(line string) string {
		t.Helper()
		n++
		body := fmt.Sprintf(`{"resourceName":"llm","applyAmount":1,"sessionId":"v%d"`, n)
		if line != "" {
			body += `,"businessLine":"` + line + `"`
		}
		r := a.post(t, "/quota/apply", body+"}")
		if r.status != 200 {
			t.Fatalf("apply: %d %s", r.status, r.raw)
		}
		v, _ := r.body["policyVersion"].(string)
		hb := a.post(t, "/quota/heartbeat", fmt.Sprintf(`{"resourceName":"llm","sessionId":"v%d"}`, n))
		if hb.status != 200 || hb.body["policyVersion"] != v || v == "" {
			t.Fatalf("heartbeat's version %v, apply's %q: %d %s", hb.body["policyVersion"], v, hb.status, hb.raw)
		}
		return v
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	plain := version("")
	if version("") != plain {
		t.Fatal("the version changed with nothing changed")
	}
	seen := map[string]string{plain: "plain"}
	step := func(name, line string) {
		t.Helper()
		v := version(line)
		if prev, ok := seen[v]; ok {
			t.Fatalf("after %s the version %q is the one of %s", name, v, prev)
		}
		seen[v] = name
		if version(line) != v {
			t.Fatalf("after %s the version changed with nothing changed", name)
		}
	}
	r := a.post(t, "/admin/policies/llm/grants", `{"amount":500,"expiresAt":"`+exp+`","reason":"launch"}`)
	if r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.raw)
	}
	step("a grant", "")
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/llm/grants/" + r.body["grant"].(map[string]any)["id"].(string)})
	if version("") != plain {
		t.Fatal("voiding the only grant did not bring the version back to the plain one")
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":2}`})
	step("a line", "a")
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":3}`})
	step("a line's weight", "a")
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})
	step("another line", "a")
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/pools", body: `{"sharedPercent":50,"dedicatedPercent":40,"bufferPercent":10}`})
	step("the pool settings", "a")
	a.mustOK(t, request{method: "POST", path: "/admin/policies/llm/buffer/release", body: `{"amount":10,"businessLine":"a","reason":"promo"}`})
	step("a buffer release", "a")
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/llm/lines/b"})
	step("a line's removal", "a")
}

// TestPolicyPutAndPatchTakePools: PUT and PATCH /admin/policies/{r} take
// the policy's "pools" settings; a limit or settings the lines do not fit,
// shares not summing to 100 or an unknown field is a 400 that changes
// nothing (neither the policy nor the pools); a new limit lays the pools
// out again in Redis.
func TestPolicyPutAndPatchTakePools(t *testing.T) {
	a, _ := newPoolsHarness(t)
	r := a.do(t, request{method: "PUT", path: "/admin/policies/llm", body: `{"quotaType":"TOKENS","totalLimit":100000,
		"pools":{"sharedPercent":50,"dedicatedPercent":40,"bufferPercent":10,"borrowLimitPercent":300}}`})
	if r.status != 201 || r.body["pools"].(map[string]any)["sharedPercent"].(interface{ String() string }).String() != "50" {
		t.Fatalf("create with pools: %d %s", r.status, r.raw)
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","dedicated":30000}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"EXPLORE","weight":1}`})
	state := func() string {
		return string(a.get(t, "/admin/policies/llm").raw) + string(a.get(t, "/admin/policies/llm/pools").raw)
	}
	before := state()
	if num(t, a.get(t, "/admin/policies/llm/pools"), "shared") != 50000 {
		t.Fatalf("pools: %s", before)
	}
	bad := []struct {
		name, method, body, field string
	}{
		{"shares not summing to 100", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":70,"dedicatedPercent":30,"bufferPercent":10}}`, "pools"},
		{"unknown pools field", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercnt":60}}`, "pools.sharedPercnt"},
		{"unknown elasticity", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"elasticity":"SOMETIMES"}}`, "pools.elasticity"},
		{"negative share", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":-10,"dedicatedPercent":100,"bufferPercent":10}}`, "pools.sharedPercent"},
		{"pools not an object", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":7}`, "pools"},
		{"a limit the lines do not fit", "PUT", `{"quotaType":"TOKENS","totalLimit":50000}`, "totalLimit"},
		{"settings the lines do not fit", "PUT", `{"quotaType":"TOKENS","totalLimit":100000,"pools":{"sharedPercent":75,"dedicatedPercent":20,"bufferPercent":5}}`, "pools"},
		{"patch: a limit the lines do not fit", "PATCH", `{"totalLimit":50000}`, "totalLimit"},
		{"patch: settings the lines do not fit", "PATCH", `{"pools":{"sharedPercent":70,"dedicatedPercent":20}}`, "pools"},
		{"patch: shares not summing to 100", "PATCH", `{"pools":{"sharedPercent":61}}`, "pools"},
		{"patch: a bad policy field next to good pools", "PATCH", `{"leakThresholdSeconds":-1,"pools":{"borrowLimitPercent":100}}`, "leakThresholdSeconds"},
		{"patch: borrowing limit too high", "PATCH", `{"pools":{"borrowLimitPercent":1001}}`, "pools.borrowLimitPercent"},
	}
	for _, tc := range bad {
		r := a.do(t, request{method: tc.method, path: "/admin/policies/llm", body: tc.body})
		if r.status != 400 || !strings.Contains(string(r.raw), `"message":"invalid `+tc.field+`:`) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, r.status, r.raw, tc.field)
		}
		if after := state(); after != before {
			t.Fatalf("%s changed the policy or the pools:\n%s\nbefore:\n%s", tc.name, after, before)
		}
	}
	// PATCH of the pools alone leaves the policy as it is.
	pol := string(a.get(t, "/admin/policies/llm").raw)
	r = a.do(t, request{method: "PATCH", path: "/admin/policies/llm", body: `{"pools":{"borrowLimitPercent":400}}`})
	if r.status != 200 || string(a.get(t, "/admin/policies/llm").raw) != pol {
		t.Fatalf("patch pools: %d %s", r.status, r.raw)
	}
	if got := a.get(t, "/admin/policies/llm/pools").body["pools"].(map[string]any)["borrowLimitPercent"]; fmt.Sprint(got) != "400" {
		t.Fatalf("borrowLimitPercent after the patch: %v", got)
	}
	// A new limit re-cuts the pools in Redis: a's 30 000 + a borrowing of
	// 90 000 fits only the new shared pool of 100 000.
	a.mustOK(t, request{method: "PATCH", path: "/admin/policies/llm", body: `{"totalLimit":200000}`})
	if r := a.post(t, "/quota/apply", `{"resourceName":"llm","applyAmount":120000,"businessLine":"a","sessionId":"big"}`); r.status != 200 {
		t.Fatalf("apply after the new limit: %d %s", r.status, r.raw)
	}
	// "pools": null brings the defaults back.
	a.mustOK(t, request{method: "PATCH", path: "/admin/policies/llm", body: `{"pools":null}`})
	if got := a.get(t, "/admin/policies/llm/pools").body["pools"].(map[string]any)["sharedPercent"]; fmt.Sprint(got) != "60" {
		t.Fatalf("sharedPercent after pools: null: %v", got)
	}
}

// TestStatusShowsEachLinesReservedAndMode: GET /quota/status shows, per
// line, what its open sessions hold and its elasticity mode: the one the
// controller chose under AUTO (kept in Redis, so any instance shows it),
// PREDICTIVE before it chose, or the one the settings pin.
func TestStatusShowsEachLinesReservedAndMode(t *testing.T) {
	a, _, mr := newPoolsHarnessOn(t, miniredis.RunT(t))
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":10000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a", body: `{"tier":"CORE","weight":1}`})
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/b", body: `{"tier":"GROWTH","weight":1}`})
	a.mustOK(t, request{method: "POST", path: "/quota/apply", body: `{"resourceName":"llm","applyAmount":100,"businessLine":"a","sessionId":"s1"}`})
	a.mustOK(t, request{method: "POST", path: "/quota/apply", body: `{"resourceName":"llm","applyAmount":50,"businessLine":"a","sessionId":"s2"}`})
	a.mustOK(t, request{method: "POST", path: "/quota/finish", body: `{"resourceName":"llm","sessionId":"s2","actualUsedAmount":20}`})
	lines := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, l := range a.status(t, "llm").body["pools"].(map[string]any)["lines"].([]any) {
			m := l.(map[string]any)
			out[m["businessLine"].(string)] = m
		}
		return out
	}
	mr.HSet("qc:{llm}:pl", "m:b", "REACTIVE") // what the controller of another instance chose
	ls := lines()
	if fmt.Sprintf("%v %v %v", ls["a"]["used"], ls["a"]["reserved"], ls["b"]["reserved"]) != "120 100 0" {
		t.Fatalf("used, reserved: %q: %v", fmt.Sprintf("%v %v %v", ls["a"]["used"], ls["a"]["reserved"], ls["b"]["reserved"]), ls)
	}
	if ls["a"]["elasticityMode"] != "PREDICTIVE" || ls["b"]["elasticityMode"] != "REACTIVE" {
		t.Fatalf("modes under AUTO: %v %v", ls["a"]["elasticityMode"], ls["b"]["elasticityMode"])
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/pools", body: `{"elasticity":"OFF"}`})
	if ls := lines(); ls["a"]["elasticityMode"] != "OFF" || ls["b"]["elasticityMode"] != "OFF" {
		t.Fatalf("modes under OFF: %v", ls)
	}
}
