package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

// FuzzDecodeApply posts arbitrary bodies to /quota/apply.
func FuzzDecodeApply(f *testing.F) {
	f.Fuzz(func(t *testing.T, ctype uint8, body []byte) {
		e := fuzzEnv(t)
		e.mu.Lock()
		defer e.mu.Unlock()
		ct, ctOK := fzContentType(ctype)
		before := e.status(t, fzApplyRes)
		a := e.serve(t, http.MethodPost, "/quota/apply", ct, body)
		req, verdict := fzWantApply(body)
		unknown := verdict == fzGood && !fzKnownResource(e, req.resource) // well-formed, but no policy: 404
		if a.status >= 300 {
			fzCheckRefusal(t, ctOK, body, verdict, a)
			if ctOK && len(body) <= 1<<20 {
				switch {
				case unknown && a.code() != CodeResourceNotFound:
					t.Fatalf("apply for %q, which has no policy, answered %s, want 404 RESOURCE_NOT_FOUND", req.resource, a)
				case !unknown && verdict == fzGood && a.code() != CodeQuotaExhausted && a.code() != CodeSessionConflict:
					t.Fatalf("a valid apply answered %s, want 200, 429 or 409 SESSION_CONFLICT", a)
				}
			}
			e.fzUnchanged(t, fzApplyRes, before, a)
			return
		}
		// 2xx: the body must be one the oracle takes, and the answer must fit it.
		if !ctOK || verdict != fzGood || unknown || a.status != http.StatusOK {
			t.Fatalf("apply answered %s to a body the oracle does not take (Content-Type ok: %v)", a, ctOK)
		}
		if a.body["success"] != true || a.code() != CodeSuccess {
			t.Fatalf("apply 200 without success: %s", a)
		}
		granted, sid := a.num(t, "grantedAmount"), a.body["sessionId"].(string)
		switch {
		case req.min == 0 && granted != req.amount,
			req.min > 0 && (granted < req.min || granted > req.amount):
			t.Fatalf("applyAmount %d, minAmount %d: granted %d: %s", req.amount, req.min, granted, a)
		case req.session != "" && sid != req.session:
			t.Fatalf("asked for session %q, got %q: %s", req.session, sid, a)
		case sid == "":
			t.Fatalf("apply 200 without a sessionId: %s", a)
		}
		if req.resource == fzApplyRes {
			after := e.status(t, fzApplyRes)
			dRes := after.num(t, "reservedAmount") - before.num(t, "reservedAmount")
			dUsed := after.num(t, "usedAmount") - before.num(t, "usedAmount")
			// A new grant reserves it; a replay of an earlier one changes nothing.
			if dUsed != 0 || (dRes != granted && dRes != 0) {
				t.Fatalf("granted %d, but reserved moved by %d and used by %d:\nbefore %s\nafter  %s", granted, dRes, dUsed, before, after)
			}
			if dRes != 0 && after.num(t, "remainingQuota") != a.num(t, "remainingQuota") {
				t.Fatalf("apply says %d remain, status says %d", a.num(t, "remainingQuota"), after.num(t, "remainingQuota"))
			}
		} else {
			e.fzUnchanged(t, fzApplyRes, before, a)
		}
		// Give the grant back so the resource never runs dry: a finish with
		// actual 0 only releases the reservation.
		_, err := e.svc.Finish(t.Context(), quota.FinishRequest{ResourceName: req.resource, SessionID: sid, ClientID: req.client})
		if err != nil && !errors.Is(err, quota.ErrSessionConflict) {
			t.Fatalf("give back session %s: %v", sid, err)
		}
	})
}

// FuzzDecodeFinish posts arbitrary bodies to /quota/finish. In the body, the
// JSON string "fz-finish" stands for the current finish resource and
// "fz-live" for its USING session, so that a first finish stays reachable
// however many inputs settled one before; older ones keep their real ids
// (fz-live-1, …) for repeats.
func FuzzDecodeFinish(f *testing.F) {
	f.Fuzz(func(t *testing.T, ctype uint8, body []byte) {
		e := fuzzEnv(t)
		e.mu.Lock()
		defer e.mu.Unlock()
		ct, ctOK := fzContentType(ctype)
		// The live session may have been settled by another way (a replayed
		// apply given back by FuzzDecodeApply in the same process).
		if _, err := e.svc.Heartbeat(t.Context(), e.finishRes, e.live, ""); errors.Is(err, quota.ErrSessionNotActive) {
			if err := e.newLive(t.Context()); err != nil {
				t.Fatalf("next live session: %v", err)
			}
		} else if err != nil {
			t.Fatalf("heartbeat live session %s: %v", e.live, err)
		}
		body = []byte(strings.NewReplacer(`"`+fzFinishRes+`"`, `"`+e.finishRes+`"`, `"`+fzLiveID+`"`, `"`+e.live+`"`).Replace(string(body)))
		before := e.status(t, e.finishRes)
		a := e.serve(t, http.MethodPost, "/quota/finish", ct, body)
		req, verdict := fzWantFinish(body)
		unknown := verdict == fzGood && !fzKnownResource(e, req.resource)
		if a.status >= 300 {
			fzCheckRefusal(t, ctOK, body, verdict, a)
			if ctOK && len(body) <= 1<<20 {
				switch {
				case unknown && a.code() != CodeResourceNotFound:
					t.Fatalf("finish for %q, which has no policy, answered %s, want 404 RESOURCE_NOT_FOUND", req.resource, a)
				case !unknown && verdict == fzGood && a.code() != CodeSessionNotFound && a.code() != CodeSessionConflict && a.code() != CodeSessionNotActive:
					t.Fatalf("a valid finish answered %s, want 200, 404 SESSION_NOT_FOUND or 409", a)
				}
			}
			e.fzUnchanged(t, e.finishRes, before, a)
			return
		}
		if !ctOK || verdict != fzGood || unknown || a.status != http.StatusOK {
			t.Fatalf("finish answered %s to a body the oracle does not take (Content-Type ok: %v)", a, ctOK)
		}
		if a.body["success"] != true || a.code() != CodeSuccess {
			t.Fatalf("finish 200 without success: %s", a)
		}
		g, c, rf, ov := a.num(t, "grantedAmount"), a.num(t, "chargedAmount"), a.num(t, "refundedAmount"), a.num(t, "overageAmount")
		if c != req.actual || rf != max(0, g-c) || ov != max(0, c-g) || a.body["sessionId"] != req.session {
			t.Fatalf("finish of %s with actual %d answered %s", req.session, req.actual, a)
		}
		if req.resource == e.finishRes {
			after := e.status(t, e.finishRes)
			dRes := after.num(t, "reservedAmount") - before.num(t, "reservedAmount")
			dUsed := after.num(t, "usedAmount") - before.num(t, "usedAmount")
			// A first finish moves the grant from reserved to the actual in
			// used; a repeat changes nothing.
			if !(dRes == -g && fzNear(dUsed, c, after.num(t, "usedAmount"))) && !(dRes == 0 && dUsed == 0) {
				t.Fatalf("finish granted %d charged %d, but reserved moved by %d and used by %d:\nbefore %s\nafter  %s", g, c, dRes, dUsed, before, after)
			}
			if dRes != 0 && after.num(t, "remainingQuota") != a.num(t, "remainingQuota") {
				t.Fatalf("finish says %d remain, status says %d", a.num(t, "remainingQuota"), after.num(t, "remainingQuota"))
			}
		} else {
			e.fzUnchanged(t, e.finishRes, before, a)
		}
		switch {
		case req.resource == e.finishRes && e.status(t, e.finishRes).num(t, "usedAmount") > fzFinishLim:
			// Used past the limit by an overage: start afresh, so that amounts
			// stay exact (see fzKnownLuaPrecision) and grants possible.
			if err := e.newFinishResource(t.Context()); err != nil {
				t.Fatalf("next finish resource: %v", err)
			}
		case req.resource == e.finishRes && req.session == e.live:
			if err := e.newLive(t.Context()); err != nil {
				t.Fatalf("next live session: %v", err)
			}
		}
	})
}

// FuzzPutPolicy PUTs arbitrary bodies to /admin/policies/{name}. fz-put is
// put back to its baseline after every 2xx; the other fuzzers' resources
// are left alone.
func FuzzPutPolicy(f *testing.F) {
	f.Fuzz(func(t *testing.T, ctype uint8, name string, body []byte) {
		if strings.HasPrefix(name, "fz-") && name != fzPutRes {
			return
		}
		e := fuzzEnv(t)
		e.mu.Lock()
		defer e.mu.Unlock()
		ct, ctOK := fzContentType(ctype)
		before := e.status(t, fzPutRes)
		nameOK := fzResourceName(name)
		existed := nameOK && fzKnownResource(e, name)
		a := e.serve(t, http.MethodPut, "/admin/policies/"+url.PathEscape(name), ct, body)
		want, verdict := fzWantPolicy(body, name)
		if a.status >= 300 {
			if nameOK {
				fzCheckRefusal(t, ctOK, body, verdict, a)
			}
			e.fzUnchanged(t, fzPutRes, before, a)
			if nameOK && !existed && fzKnownResource(e, name) {
				t.Fatalf("refused with %s, yet a policy %q now exists", a, name)
			}
			return
		}
		if !nameOK || !ctOK || verdict == fzBad {
			t.Fatalf("PUT %q answered %s to a body the oracle refuses (Content-Type ok: %v)", name, a, ctOK)
		}
		if wantStatus := map[bool]int{true: http.StatusOK, false: http.StatusCreated}[existed]; a.status != wantStatus {
			t.Fatalf("PUT %q (existed: %v) answered %d, want %d: %s", name, existed, a.status, wantStatus, a)
		}
		if a.body["resourceName"] != name || a.body["quotaType"] != want.quotaType || a.num(t, "totalLimit") != want.limit ||
			a.num(t, "leakThresholdSeconds") != cmp.Or(want.leak, quota.DefaultLeakThresholdSeconds) || a.body["failMode"] != want.failMode {
			t.Fatalf("PUT %q of %+v answered %s", name, want, a)
		}
		got, err := e.svc.Policy(t.Context(), name)
		if err != nil || got.TotalLimit != want.limit || string(got.QuotaType) != want.quotaType {
			t.Fatalf("PUT %q answered %s, but the stored policy is %+v (%v)", name, a, got, err)
		}
		if name == fzPutRes {
			if _, _, err := e.svc.PutPolicy(t.Context(), fzPutBaseline()); err != nil {
				t.Fatalf("restore %s: %v", fzPutRes, err)
			}
			e.fzUnchanged(t, fzPutRes, before, a) // limit and period are back, nothing else moved
		} else {
			e.fzUnchanged(t, fzPutRes, before, a)
		}
	})
}

// FuzzParseAmount compares parseAmount with an oracle built on big.Int.
func FuzzParseAmount(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte, required bool) {
		v, err := parseAmount("amt", json.RawMessage(raw), required)
		var ve *quota.ValidationError
		if err != nil && (!errors.As(err, &ve) || ve.Field != "amt") {
			t.Fatalf("parseAmount(%q) = %v, want a *quota.ValidationError for field amt", raw, err)
		}
		if err != nil && v != 0 {
			t.Fatalf("parseAmount(%q) = %d with error %v", raw, v, err)
		}
		want, ok := fzWantAmount(fzTrimJSONSpace(raw), required)
		if !bytes.Equal(fzTrimJSONSpace(raw), bytes.TrimSpace(raw)) {
			// Non-JSON white space (U+0085, U+00A0, …) at an edge: a JSON
			// decoder never hands parseAmount such a value. Whatever it
			// accepts must still be an integer literal in range.
			if err == nil {
				if w, ok := fzWantAmount(bytes.TrimSpace(raw), required); !ok || w != v {
					t.Fatalf("parseAmount(%q) = %d, the oracle refuses it", raw, v)
				}
			}
			return
		}
		switch {
		case ok && err != nil:
			t.Fatalf("parseAmount(%q, required=%v) refused it (%v); the oracle reads %d", raw, required, err, want)
		case !ok && err == nil:
			t.Fatalf("parseAmount(%q, required=%v) = %d; the oracle refuses it", raw, required, v)
		case ok && v != want:
			t.Fatalf("parseAmount(%q, required=%v) = %d, want %d", raw, required, v, want)
		}
	})
}

// fzResourceName: the charset, and at least one letter or digit (issue 11).
func fzResourceName(s string) bool {
	return fzCharset(s, 1, 64, "_.-") && strings.Trim(s, "_.-") != ""
}

func fzSessionID(s string) bool { return fzCharset(s, 1, 64, fzUpper+"_.:-") }

func fzClientID(s string) bool { return fzCharset(s, 0, 128, fzUpper+"_.:@/-") }

func fzKnownResource(e *fzEnv, name string) bool {
	_, err := e.svc.Policy(context.Background(), name)
	return err == nil
}

type fzApply struct {
	resource, client, session string
	amount, min               int64
}

// fzWantApply is the oracle of an apply body.
func fzWantApply(body []byte) (fzApply, fzVerdict) {
	m, ok := fzParseObject(body)
	if !ok || !fzOnly(m, "resourceName", "applyAmount", "minAmount", "clientId", "sessionId") {
		return fzApply{}, fzBad
	}
	var r fzApply
	var okR, okC, okS, okA, okM, there bool
	r.resource, okR = fzString(m, "resourceName")
	r.client, okC = fzString(m, "clientId")
	r.session, okS = fzString(m, "sessionId")
	if x, given := m["sessionId"]; given && x.kind == fzStr && x.s == "" {
		okS = false // "" is refused; absent: the server makes one
	}
	for _, k := range []string{"sessionId", "minAmount"} {
		if x, given := m[k]; given && x.kind == fzNull {
			return fzApply{}, fzBad // null is refused naming it (docs/pools.md §5, finding 8)
		}
	}
	r.amount, there, okA = fzAmount(m, "applyAmount", 1)
	okA = okA && there
	r.min, _, okM = fzAmount(m, "minAmount", 1)
	if !okR || !okC || !okS || !okA || !okM || r.min > r.amount ||
		!fzResourceName(r.resource) || !fzClientID(r.client) || (r.session != "" && !fzSessionID(r.session)) {
		return fzApply{}, fzBad
	}
	return r, fzGood
}

type fzFinish struct {
	resource, session string
	actual            int64
}

// fzWantFinish is the oracle of a finish body.
func fzWantFinish(body []byte) (fzFinish, fzVerdict) {
	m, ok := fzParseObject(body)
	if !ok || !fzOnly(m, "resourceName", "sessionId", "clientId", "actualUsedAmount") {
		return fzFinish{}, fzBad
	}
	var r fzFinish
	var okR, okS, okC, okA, there bool
	r.resource, okR = fzString(m, "resourceName")
	r.session, okS = fzString(m, "sessionId")
	client, okC := fzString(m, "clientId")
	r.actual, there, okA = fzAmount(m, "actualUsedAmount", 0)
	if !okR || !okS || !okC || !okA || !there || !fzResourceName(r.resource) || !fzSessionID(r.session) || !fzClientID(client) {
		return fzFinish{}, fzBad
	}
	return r, fzGood
}

type fzPolicy struct {
	quotaType, failMode string
	limit, leak         int64 // leak 0: the default
}

// Cron expressions and zones the oracle knows to be valid; others are
// left to the scheduler (verdict fzUnsure when the rest is good).
var (
	fzGoodCrons = map[string]bool{"": true, "@daily": true, "@hourly": true, "@monthly": true, "0 0 * * *": true, "0 0 0 * * *": true, "@every 1h": true}
	fzGoodZones = map[string]bool{"": true, "UTC": true, "Asia/Tokyo": true, "Europe/Berlin": true, "America/New_York": true}
)

// fzWantPolicy is the oracle of a PUT policy body for path name.
func fzWantPolicy(body []byte, name string) (fzPolicy, fzVerdict) {
	m, ok := fzParseObject(body)
	if !ok || !fzOnly(m, "resourceName", "quotaType", "totalLimit", "resetCron", "timezone", "leakThresholdSeconds", "failMode") {
		return fzPolicy{}, fzBad
	}
	var p fzPolicy
	res, okR := fzString(m, "resourceName")
	qt, okQ := fzString(m, "quotaType")
	fm, okF := fzString(m, "failMode")
	cron, okC := fzString(m, "resetCron")
	tz, okT := fzString(m, "timezone")
	limit, there, okL := fzAmount(m, "totalLimit", 1)
	leak, leakThere, okK := fzAmount(m, "leakThresholdSeconds", 1)
	switch {
	case !okR || !okQ || !okF || !okC || !okT || !okL || !there || !okK,
		res != "" && res != name,
		qt != "DURATION" && qt != "COUNT" && qt != "TOKENS" && qt != "BANDWIDTH",
		fm != "" && fm != "CLOSED" && fm != "OPEN",
		leakThere && leak > 7*24*3600:
		return fzPolicy{}, fzBad
	}
	p.quotaType, p.limit, p.leak, p.failMode = qt, limit, leak, fm
	if fm == "" {
		p.failMode = "CLOSED"
	}
	if x, ok := m["leakThresholdSeconds"]; ok && x.kind == fzNull {
		// An explicit null: refused ("must be at least 1") today; taking it
		// as the default would be as reasonable. Not asserted either way.
		return p, fzUnsure
	}
	if !fzGoodCrons[cron] || !fzGoodZones[tz] {
		return p, fzUnsure
	}
	return p, fzGood
}
