package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestGrantTimesBeforeTheEpochAreRefused: a grant's effectiveAt or
// expiresAt at or before 1970-01-01T00:00:00Z is a 400 that records
// nothing. One such grant used to be accepted (effectiveAt
// "0001-01-01T00:00:00Z" or "1969-12-31T23:59:59Z": negative Unix ms) and
// then every apply of its resource, with lines or without, answered 500
// (apply.lua's activeGrants reads only non-negative ms); and
// "1970-01-01T00:00:00Z" was taken for "not given" (expiresAt: "is
// required"; effectiveAt: now).
func TestGrantTimesBeforeTheEpochAreRefused(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "plain", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/search", body: `{"tier":"CORE","weight":1}`})
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, res := range []string{"plain", "llm"} {
		for _, body := range []string{
			`{"amount":5,"effectiveAt":"0001-01-01T00:00:00Z","expiresAt":"` + exp + `"}`,
			`{"amount":5,"effectiveAt":"1969-12-31T23:59:59Z","expiresAt":"` + exp + `"}`,
			`{"amount":5,"effectiveAt":"1970-01-01T00:00:00Z","expiresAt":"` + exp + `"}`,
			`{"amount":5,"expiresAt":"1970-01-01T00:00:00Z"}`,
		} {
			r := a.do(t, request{method: "POST", path: "/admin/policies/" + res + "/grants", body: body})
			msg, _ := r.body["message"].(string)
			if r.status != 400 || !strings.Contains(msg, "1970-01-01T00:00:00Z") {
				t.Fatalf("%s %s: %d %s, want 400 naming 1970-01-01T00:00:00Z", res, body, r.status, r.raw)
			}
		}
		if r := a.get(t, "/admin/policies/"+res+"/grants"); len(r.body["grants"].([]any)) != 0 {
			t.Fatalf("%s: a refused grant was recorded: %s", res, r.raw)
		}
		apply := `{"resourceName":"` + res + `","applyAmount":10,"clientId":"c"}`
		if res == "llm" {
			apply = `{"resourceName":"llm","applyAmount":10,"clientId":"c","businessLine":"search"}`
		}
		if r := a.post(t, "/quota/apply", apply); r.status != 200 || fmt.Sprint(r.body["grantedAmount"]) != "10" {
			t.Fatalf("%s: apply after the refused grants: %d %s", res, r.status, r.raw)
		}
	}
	// A grant that took effect an hour ago is fine and drawn.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	a.mustOK(t, request{method: "POST", path: "/admin/policies/plain/grants",
		body: `{"amount":5,"effectiveAt":"` + past + `","expiresAt":"` + exp + `"}`})
	if r := a.post(t, "/quota/apply", `{"resourceName":"plain","applyAmount":995,"clientId":"c"}`); r.status != 200 {
		t.Fatalf("apply drawing the backdated grant: %d %s", r.status, r.raw)
	}
}

// TestBufferReleaseRefusesEffectiveAt: a release lends the buffer at once,
// so an effectiveAt is a 400 that moves nothing. It used to be accepted,
// answered "active": false, and the buffer was lent all the same.
func TestBufferReleaseRefusesEffectiveAt(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/search", body: `{"tier":"CORE","weight":1}`})
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := a.do(t, request{method: "POST", path: "/admin/policies/llm/buffer/release",
		body: `{"amount":50,"businessLine":"search","effectiveAt":"` + later + `","reason":"later"}`})
	if msg, _ := r.body["message"].(string); r.status != 400 || !strings.Contains(msg, "effectiveAt") {
		t.Fatalf("release with effectiveAt: %d %s, want 400 naming effectiveAt", r.status, r.raw)
	}
	pools := a.status(t, "llm").body["pools"].(map[string]any)
	if fmt.Sprint(pools["bufferFree"]) != "100" {
		t.Fatalf("the refused release lent buffer: %v", pools)
	}
	if r := a.get(t, "/admin/policies/llm/grants"); len(r.body["grants"].([]any)) != 0 {
		t.Fatalf("the refused release was recorded: %s", r.raw)
	}
	a.mustOK(t, request{method: "POST", path: "/admin/policies/llm/buffer/release", body: `{"amount":50,"businessLine":"search"}`})
	if pools := a.status(t, "llm").body["pools"].(map[string]any); fmt.Sprint(pools["bufferFree"]) != "50" {
		t.Fatalf("a release without effectiveAt: %v", pools)
	}
}

// TestLineNamesNeedALetterOrDigit: a line named ".", ".." or "-" is a 400,
// as such a resource name is. "." and ".." were accepted (201), and then
// the line could not be deleted through any client that resolves dot
// segments (curl, browsers: DELETE …/lines/.. reached …/policies/llm/).
func TestLineNamesNeedALetterOrDigit(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "llm", `{"quotaType":"TOKENS","totalLimit":1000}`)
	for _, name := range []string{".", "..", "-", "_", "._-"} {
		r := a.do(t, request{method: "PUT", path: "/admin/policies/llm/lines/" + name, body: `{"tier":"CORE"}`})
		if msg, _ := r.body["message"].(string); r.status != 400 || !strings.Contains(msg, "letter or digit") {
			t.Fatalf("line %q: %d %s, want 400", name, r.status, r.raw)
		}
	}
	if r := a.get(t, "/admin/policies/llm/lines"); len(r.body["lines"].([]any)) != 0 {
		t.Fatalf("a refused line was stored: %s", r.raw)
	}
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/llm/lines/a.-_", body: `{"tier":"CORE"}`})
}

// TestDeletingAPolicyWithPoolsIsRefused: DELETE /admin/policies/{r} is a
// 409 POLICY_IN_USE while the resource has business lines or grants not
// voided, and then deletes nothing. The delete used to succeed and leave
// the lines and grants in the policy store: a policy created again under
// the name was refused a limit its invisible lines did not fit, and with a
// larger one got the old lines and grants back.
func TestDeletingAPolicyWithPoolsIsRefused(t *testing.T) {
	a, _ := newPoolsHarness(t)
	a.putPolicy(t, "dd", `{"quotaType":"TOKENS","totalLimit":1000}`)
	a.mustOK(t, request{method: "PUT", path: "/admin/policies/dd/lines/search", body: `{"tier":"CORE","dedicated":200}`})
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	g := a.mustOK(t, request{method: "POST", path: "/admin/policies/dd/grants", body: `{"amount":50,"expiresAt":"` + exp + `"}`})
	id := g.body["grant"].(map[string]any)["id"].(string)
	refused := func(want string) {
		t.Helper()
		r := a.do(t, request{method: "DELETE", path: "/admin/policies/dd"})
		if msg, _ := r.body["message"].(string); r.status != 409 || r.body["code"] != "POLICY_IN_USE" || !strings.Contains(msg, want) {
			t.Fatalf("delete: %d %s, want 409 POLICY_IN_USE naming %q", r.status, r.raw, want)
		}
		if r := a.get(t, "/admin/policies/dd"); r.status != 200 {
			t.Fatalf("the refused delete deleted the policy: %d %s", r.status, r.raw)
		}
	}
	refused("search")
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/dd/lines/search"})
	refused(id)
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/dd/grants/" + id})
	a.mustOK(t, request{method: "DELETE", path: "/admin/policies/dd"})
	a.putPolicy(t, "dd", `{"quotaType":"TOKENS","totalLimit":100}`)
	if r := a.get(t, "/admin/policies/dd/lines"); len(r.body["lines"].([]any)) != 0 {
		t.Fatalf("lines came back: %s", r.raw)
	}
	if r := a.get(t, "/admin/policies/dd/grants"); r.status != 200 || strings.Contains(string(r.raw), `"active":true`) {
		t.Fatalf("grants came back: %s", r.raw)
	}
	if r := a.do(t, request{method: "DELETE", path: "/admin/policies/nope"}); r.status != 404 {
		t.Fatalf("delete of an unknown policy: %d %s", r.status, r.raw)
	}
}
