package httpapi_test

import (
	"fmt"
	"testing"
)

// TestRefusedCriticalApplyLeavesTheBuffer: an apply larger than anything
// the resource could grant (100,000 on a limit of 10,000), critical or a
// continuation, put the whole spare buffer into the shared pool before it
// was refused (apply.lua's spareToShared), and an operator's buffer
// release then answered 409 "0 free" until the controller gave it back.
// apply.lua now moves the buffer only when the apply then fits by capacity
// (pools.Model.fitsAfterSpare): the refused apply leaves it where it was
// and the release succeeds.
func TestRefusedCriticalApplyLeavesTheBuffer(t *testing.T) {
	poolsBackends(t, func(t *testing.T, a *testAPI, res string) {
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
		a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE"}`})
		a.mustOK(t, request{method: "PUT", path: base + "/lines/b", body: `{"tier":"GROWTH"}`})
		a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":10,"businessLine":"b"}`})
		pools := func() string {
			pl := a.status(t, res).body["pools"].(map[string]any)
			return fmt.Sprint(pl["bufferFree"], " ", pl["sharedBuffer"])
		}
		before := pools()
		if before != "990 0" {
			t.Fatalf("set-up: bufferFree, sharedBuffer %s; want 990 0", before)
		}
		for i, body := range []string{`"critical":true`, `"continuation":true`} {
			r := a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":100000,"clientId":"c","businessLine":"a","sessionId":"big%d",%s}`, res, i, body))
			if r.status != 429 {
				t.Fatalf("oversized apply (%s): %d %s", body, r.status, r.raw)
			}
			if got := pools(); got != before {
				t.Fatalf("oversized apply (%s) refused moved the buffer: bufferFree, sharedBuffer %s; want %s", body, got, before)
			}
		}
		a.mustOK(t, request{method: "POST", path: base + "/buffer/release", body: `{"amount":990,"businessLine":"a"}`})
		r := a.post(t, "/quota/apply", fmt.Sprintf(`{"resourceName":%q,"applyAmount":100000,"clientId":"c","businessLine":"a","sessionId":"big2"}`, res))
		if r.status != 429 {
			t.Fatalf("oversized apply after the release: %d %s", r.status, r.raw)
		}
		if got := pools(); got != "0 0" {
			t.Fatalf("bufferFree, sharedBuffer %s after the release and a refused apply; want 0 0", got)
		}
	})
}
