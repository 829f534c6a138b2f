package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

func TestPatchPolicyIsAMergePatch(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "DURATION", "totalLimit": 3600, "resetCron": "0 0 * * *", "timezone": "Asia/Tokyo"})
		p, err := c.PatchPolicy(ctxOf(t), res, map[string]any{"totalLimit": 7200}, client.PatchOptions{Reason: "more time"})
		if err != nil {
			t.Fatal(err)
		}
		if p.TotalLimit != 7200 || p.ResetCron != "0 0 * * *" || p.Timezone != "Asia/Tokyo" || p.QuotaType != "DURATION" {
			t.Fatalf("after patch: %+v (a merge patch keeps what it leaves out)", p)
		}
		if st, _ := getStatus(t, s, res); st.limit != 7200 {
			t.Fatalf("status limit %d, want 7200 at once", st.limit)
		}
		applyN(t, c, res, 1)
		before, err := c.GetPolicy(ctxOf(t), res)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, body, query string
			status            int
			code              string
		}{
			{"quotaType with usage", `{"quotaType":"TOKENS"}`, "", 409, "POLICY_IN_USE"},
			{"null totalLimit", `{"totalLimit":null}`, "", 400, "INVALID_ARGUMENT"},
			{"null quotaType", `{"quotaType":null}`, "?force=true", 400, "INVALID_ARGUMENT"},
			{"negative limit", `{"totalLimit":-1}`, "", 400, "INVALID_ARGUMENT"},
			{"string limit", `{"totalLimit":"100"}`, "", 400, "INVALID_ARGUMENT"},
			{"fraction", `{"totalLimit":1.5}`, "", 400, "INVALID_ARGUMENT"},
			{"zero leak threshold", `{"leakThresholdSeconds":0}`, "", 400, "INVALID_ARGUMENT"}, // as PUT; null is the default
			{"negative leak threshold", `{"leakThresholdSeconds":-1}`, "", 400, "INVALID_ARGUMENT"},
			{"bad cron", `{"resetCron":"every day"}`, "", 400, "INVALID_ARGUMENT"},
			{"bad zone", `{"timezone":"Mars/Base"}`, "", 400, "INVALID_ARGUMENT"},
			{"bad type", `{"quotaType":"LITRES"}`, "?force=true", 400, "INVALID_ARGUMENT"},
			{"unknown member", `{"limit":5}`, "", 400, "INVALID_ARGUMENT"},
			{"read-only member", `{"createdAt":"2020-01-01T00:00:00Z"}`, "", 400, "INVALID_ARGUMENT"},
			{"rename", `{"resourceName":"other"}`, "", 400, "INVALID_ARGUMENT"},
			{"not an object", `[1,2]`, "", 400, "INVALID_ARGUMENT"},
			{"duplicate member", `{"totalLimit":5,"totalLimit":6}`, "", 400, "INVALID_ARGUMENT"},
			{"bad force", `{"totalLimit":5}`, "?force=yes", 400, "INVALID_ARGUMENT"},
			{"unknown option", `{"totalLimit":5}`, "?dryRun=true", 400, "INVALID_ARGUMENT"},
			{"reason too long", `{"totalLimit":5}`, "?reason=" + strings.Repeat("x", 501), 400, "INVALID_ARGUMENT"},
			{"unknown resource", `{"totalLimit":5}`, "", 404, "RESOURCE_NOT_FOUND"},
		} {
			name := res
			if tc.code == "RESOURCE_NOT_FOUND" {
				name = "no-such-" + testenv.RandomSuffix()
			}
			code, out, _ := call(t, s, http.MethodPatch, "/admin/policies/"+name+tc.query, tc.body)
			wantCode(t, tc.name, code, out, tc.status, tc.code)
		}
		if after, err := c.GetPolicy(ctxOf(t), res); err != nil || *after != *before {
			t.Fatalf("refused patches changed the policy: %+v → %+v (%v)", before, after, err)
		}
		if _, err := c.PatchPolicy(ctxOf(t), res, map[string]any{"quotaType": "TOKENS"}, client.PatchOptions{}); !errors.Is(err, client.ErrPolicyInUse) {
			t.Fatalf("client: %v, want ErrPolicyInUse", err)
		}
		p, err = c.PatchPolicy(ctxOf(t), res, json.RawMessage(`{"quotaType":"TOKENS","resetCron":null,"timezone":null}`),
			client.PatchOptions{Force: true, Reason: "tokens now"})
		if err != nil {
			t.Fatal(err)
		}
		if p.QuotaType != "TOKENS" || p.ResetCron != "" || p.Timezone != "UTC" || p.TotalLimit != 7200 {
			t.Fatalf("forced patch: %+v", p)
		}
		if e := lastAudit(t, s, res); e["action"] != "policy.put" || e["reason"] != "tokens now" {
			t.Fatalf("audit entry %v: want policy.put with the reason", e)
		}
	})
}

func TestResetStartsANewPeriodAndInFlightSessionsSettleInTheirOwn(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 1000, "resetCron": "0 0 1 * *"})
		ids := applyN(t, c, res, 2)
		if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: ids[0], ActualUsedAmount: 100}); err != nil {
			t.Fatal(err)
		}
		st0, _ := getStatus(t, s, res)
		if st0.used != 100 || st0.reserved != 100 {
			t.Fatalf("before reset: %+v", st0)
		}
		r, err := c.ResetPeriod(ctxOf(t), res, "budget topped up")
		if err != nil {
			t.Fatal(err)
		}
		if !r.PeriodStart.After(r.PreviousPeriod.PeriodStart) || r.NextResetAt == nil || r.PreviousPeriod.NextResetAt == nil ||
			!r.NextResetAt.Equal(*r.PreviousPeriod.NextResetAt) {
			t.Fatalf("reset %+v: want a later start and the same next cron reset", r)
		}
		st1, out := getStatus(t, s, res)
		if st1.used != 0 || st1.reserved != 0 || st1.remaining != 1000 || out["periodStart"] != r.PeriodStart.UTC().Format("2006-01-02T15:04:05.000Z") {
			t.Fatalf("after reset: %+v %v", st1, out)
		}
		// The session in flight settles into the period it was granted in.
		if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: ids[1], ActualUsedAmount: 10}); err != nil {
			t.Fatal(err)
		}
		st2, _ := getStatus(t, s, res)
		if st1.active != 1 || st2.active != 0 {
			t.Fatalf("active sessions %d then %d, want 1 then 0 (they count every period)", st1.active, st2.active)
		}
		st1.active = 0
		if st2 != st1 {
			t.Fatalf("a finish of the old period moved the new one: %+v → %+v", st1, st2)
		}
		if e := lastAudit(t, s, res); e["action"] != "policy.reset" || e["reason"] != "budget topped up" || e["before"] == nil || e["after"] == nil {
			t.Fatalf("audit entry %v", e)
		}
		for _, tc := range []struct {
			name, path, body string
			status           int
			code             string
		}{
			{"unknown field", "/admin/policies/" + res + "/reset", `{"why":"x"}`, 400, "INVALID_ARGUMENT"},
			{"control characters", "/admin/policies/" + res + "/reset", `{"reason":"a\u0000b"}`, 400, "INVALID_ARGUMENT"},
			{"query", "/admin/policies/" + res + "/reset?reason=x", `{}`, 400, "INVALID_ARGUMENT"},
			{"bad name", "/admin/policies/BAD/reset", `{}`, 400, "INVALID_ARGUMENT"},
			{"unknown", "/admin/policies/no-such-" + testenv.RandomSuffix() + "/reset", `{}`, 404, "RESOURCE_NOT_FOUND"},
		} {
			code, out, _ := call(t, s, http.MethodPost, tc.path, tc.body)
			wantCode(t, tc.name, code, out, tc.status, tc.code)
		}
		if st3, out3 := getStatus(t, s, res); st3 != st1 || out3["periodStart"] != out["periodStart"] {
			t.Fatalf("refused resets changed the period: %v → %v", out, out3)
		}
	})
}

func TestDeletePolicyWaitsForLiveSessions(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 1000})
		ids := applyN(t, c, res, 1)
		if _, err := c.DeletePolicy(ctxOf(t), res, "retired"); !errors.Is(err, client.ErrPolicyInUse) {
			t.Fatalf("delete with a live session: %v, want ErrPolicyInUse", err)
		}
		// Refused, and nothing changed: the limit is back and applies work.
		if st, _ := getStatus(t, s, res); st.limit != 1000 || st.remaining != 900 {
			t.Fatalf("after a refused delete: %+v", st)
		}
		ids = append(ids, applyN(t, c, res, 1)...)
		code, out, _ := call(t, s, http.MethodDelete, "/admin/policies/"+res+"?reason=x&force=true", nil)
		wantCode(t, "unknown option", code, out, 400, "INVALID_ARGUMENT")
		for _, id := range ids {
			if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: id, ActualUsedAmount: 1}); err != nil {
				t.Fatal(err)
			}
		}
		p, err := c.DeletePolicy(ctxOf(t), res, "retired")
		if err != nil || p.ResourceName != res || p.TotalLimit != 1000 {
			t.Fatalf("delete: %+v, %v", p, err)
		}
		if _, err := c.GetPolicy(ctxOf(t), res); !errors.Is(err, client.ErrResourceNotFound) {
			t.Fatalf("after delete: %v", err)
		}
		if _, err := c.DeletePolicy(ctxOf(t), res, ""); !errors.Is(err, client.ErrResourceNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if e := lastAudit(t, s, res); e["action"] != "policy.delete" || e["after"] != nil || e["reason"] != "retired" {
			t.Fatalf("audit entry %v", e)
		}
	})
}

// TestOptionalBodiesRefuseNull: the bodies that may be left out (reset,
// forced finish) are still JSON objects when sent; a literal null was read
// as {} and reset the period.
func TestOptionalBodiesRefuseNull(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10})
	_, a, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "applyAmount": 3})
	before, _ := getStatus(t, s, res)
	for _, path := range []string{"/admin/policies/" + res + "/reset", "/admin/sessions/" + a["sessionId"].(string) + "/finish"} {
		code, out, _ := call(t, s, http.MethodPost, path, "null")
		wantCode(t, path+" with null", code, out, http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	if after, _ := getStatus(t, s, res); after != before {
		t.Fatalf("a refused null body changed the status: %+v → %+v", before, after)
	}
}

// DELETE takes its reason in the query: a body (here the reason where a
// caller might put it) is refused, and the policy stays. It was ignored
// and the policy deleted.
func TestDeletePolicyRefusesABody(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10})
	for _, body := range []any{map[string]any{"reason": "retired"}, "junk"} {
		code, out, _ := call(t, s, http.MethodDelete, "/admin/policies/"+res, body)
		wantCode(t, fmt.Sprintf("DELETE with the body %v", body), code, out, http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	if code, out, _ := call(t, s, http.MethodGet, "/admin/policies/"+res, nil); code != http.StatusOK || fmt.Sprint(out["totalLimit"]) != "10" {
		t.Fatalf("after the refused deletes: %d %v", code, out)
	}
}
