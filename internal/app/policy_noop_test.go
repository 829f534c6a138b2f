package app_test

import (
	"net/http"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// A PUT of the identical policy and a PATCH of {} change nothing: the
// policy keeps its updatedAt, apply answers keep their policyVersion (an SDK
// LocalPool keeps its batch), and no audit entry is written. A real change
// still moves all three.
func TestPolicyWriteThatChangesNothingKeepsTheVersion(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		body := map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "resetCron": "0 0 * * *", "timezone": "Asia/Tokyo"}
		putPolicy(t, s, res, body)
		version := func() string {
			t.Helper()
			r, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ApplyAmount: 1, ClientID: "a"})
			if err != nil || r.PolicyVersion == "" {
				t.Fatalf("apply: %+v, %v; want a policyVersion", r, err)
			}
			return r.PolicyVersion
		}
		audits := func() int {
			t.Helper()
			code, out, _ := call(t, s, http.MethodGet, "/admin/audit?resourceName="+res+"&limit=500", nil)
			entries, ok := out["entries"].([]any)
			if code != http.StatusOK || !ok {
				t.Fatalf("audit: %d %v", code, out)
			}
			return len(entries)
		}
		before, err := c.GetPolicy(ctxOf(t), res)
		if err != nil {
			t.Fatal(err)
		}
		v0, n0 := version(), audits()

		code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+res, body)
		if code != http.StatusOK || out["updatedAt"] != before.UpdatedAt.Format("2006-01-02T15:04:05.000Z07:00") {
			t.Fatalf("identical PUT: %d %v; want 200 with updatedAt %v", code, out, before.UpdatedAt)
		}
		if code, out, _ := call(t, s, http.MethodPatch, "/admin/policies/"+res, `{}`); code != http.StatusOK {
			t.Fatalf("PATCH {}: %d %v", code, out)
		}
		if _, err := c.PatchPolicy(ctxOf(t), res, map[string]any{"totalLimit": 1000}, client.PatchOptions{Reason: "same"}); err != nil {
			t.Fatal(err)
		}
		if after, err := c.GetPolicy(ctxOf(t), res); err != nil || *after != *before {
			t.Fatalf("after writes of the same policy: %+v (%v); want %+v", after, err, before)
		}
		if v, n := version(), audits(); v != v0 || n != n0 {
			t.Fatalf("policyVersion %q → %q, audit entries %d → %d; want both unchanged", v0, v, n0, n)
		}
		if st, _ := getStatus(t, s, res); st.limit != 1000 {
			t.Fatalf("status limit %d, want 1000", st.limit)
		}

		if _, err := c.PatchPolicy(ctxOf(t), res, map[string]any{"totalLimit": 2000}, client.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if v, n := version(), audits(); v == v0 || n != n0+1 {
			t.Fatalf("after a change: policyVersion %q (was %q), audit entries %d (want %d)", v, v0, n, n0+1)
		}
	})
}
