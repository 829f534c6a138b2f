package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
)

// lineBuffers is the buffer status shows lent to each line, and the free
// buffer.
func lineBuffers(t *testing.T, a *testAPI, res string) (map[string]string, string) {
	t.Helper()
	st := a.status(t, res)
	p, ok := st.body["pools"].(map[string]any)
	if !ok {
		t.Fatalf("status without pools: %s", st.raw)
	}
	out := map[string]string{}
	for _, l := range p["lines"].([]any) {
		m := l.(map[string]any)
		out[fmt.Sprint(m["businessLine"])] = fmt.Sprint(m["buffer"])
	}
	return out, fmt.Sprint(p["bufferFree"])
}

// TestAReleaseRightAfterRedisLossRebuildsTheLayout: a buffer release right
// after Redis lost the resource's keys answered 404 "unknown business
// line" until something (an apply) rebuilt the layout (docs/pools.md §5,
// open finding 5). Now the release writes the stored layout back first,
// with the moves rebuilt from the journal, as the seed step does: it is
// 201, and it is in force next to the release made before the loss, in
// Redis and after a rebuild from MySQL alone.
func TestAReleaseRightAfterRedisLossRebuildsTheLayout(t *testing.T) {
	lossBackends(t, func(t *testing.T, w *lossWorld) {
		a, base := w.a, "/admin/policies/"+w.res
		a.putPolicy(t, w.res, `{"quotaType":"TOKENS","totalLimit":100000}`) // buffer 10 000
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/a", body: `{"tier":"CORE"}`})
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/b", body: `{"tier":"GROWTH"}`})
		a.mustOK(t, request{method: http.MethodPost, path: base + "/buffer/release", body: `{"amount":1000,"businessLine":"a","reason":"before"}`})
		w.wipe(t)
		r := a.post(t, base+"/buffer/release", `{"amount":500,"businessLine":"b","reason":"right after the loss"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("release after Redis lost the layout: %d %s, want 201", r.status, r.raw)
		}
		r = a.post(t, base+"/buffer/release", `{"amount":200,"reason":"to the shared pool"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("release to the shared pool: %d %s, want 201", r.status, r.raw)
		}
		want := func(when string) {
			t.Helper()
			lent, free := lineBuffers(t, a, w.res)
			if lent["a"] != "1000" || lent["b"] != "500" || free != "8300" {
				t.Fatalf("%s: lent %v, free %s; want a 1000, b 500, free 8300 (10 000 less the three releases)", when, lent, free)
			}
		}
		want("after the release")
		w.wipe(t)
		want("rebuilt from MySQL")
	})
}
