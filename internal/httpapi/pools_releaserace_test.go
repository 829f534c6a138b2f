package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestConcurrentReleasesAndVoidsKeepTheBuffer: buffer releases and voids of
// one resource take the pools' turn (the policy row's lock) with its other
// changes. 16 releases of 1 000 at once against a buffer of 10 000 (sent to
// two instances on MariaDB): exactly 10 are recorded (201), the others
// answered 409, and what Redis lends equals what is recorded; then every
// release voided twice at once: each is voided once (the other void 404),
// nothing is given back twice, and the whole buffer is free again.
func TestConcurrentReleasesAndVoidsKeepTheBuffer(t *testing.T) {
	raceBackends(t, func(t *testing.T, as []*testAPI, res string) {
		a := as[0]
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`) // buffer 10 000
		base := "/admin/policies/" + res
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/a", body: `{"tier":"CORE","weight":1}`})
		rqs := make([]request, raceN)
		for i := range rqs {
			rqs[i] = request{method: http.MethodPost, path: base + "/buffer/release", body: `{"amount":1000,"businessLine":"a","reason":"race"}`}
		}
		var ids []string
		for i, r := range race(t, as, rqs) {
			switch r.status {
			case http.StatusCreated:
				ids = append(ids, fmt.Sprint(r.body["release"].(map[string]any)["id"]))
			case http.StatusConflict:
			default:
				t.Fatalf("release %d: %d %s, want 201 or 409", i, r.status, r.raw)
			}
		}
		pool := func() (lent, free string) {
			st := a.status(t, res)
			p := st.body["pools"].(map[string]any)
			for _, l := range p["lines"].([]any) {
				if m := l.(map[string]any); m["businessLine"] == "a" {
					lent = fmt.Sprint(m["buffer"])
				}
			}
			return lent, fmt.Sprint(p["bufferFree"])
		}
		if lent, free := pool(); len(ids) != 10 || lent != "10000" || free != "0" {
			t.Fatalf("%d releases recorded, Redis lends %s to a and has %s free; want 10, 10000, 0", len(ids), lent, free)
		}
		var voids []request
		for _, id := range ids {
			for range 2 {
				voids = append(voids, request{method: http.MethodDelete, path: base + "/grants/" + id})
			}
		}
		ok := map[string]int{}
		for i, r := range race(t, as, voids) {
			switch r.status {
			case http.StatusNoContent, http.StatusOK:
				ok[voids[i].path]++
			case http.StatusNotFound:
			default:
				t.Fatalf("%s: %d %s, want 204 or 404", voids[i].path, r.status, r.raw)
			}
		}
		for _, id := range ids {
			if n := ok[base+"/grants/"+id]; n != 1 {
				t.Errorf("release %s voided %d times, want once", id, n)
			}
		}
		if lent, free := pool(); lent != "0" || free != "10000" {
			t.Fatalf("after the voids Redis lends %s to a and has %s free; want 0 and 10000", lent, free)
		}
	})
}
