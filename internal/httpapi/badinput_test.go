package httpapi_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The fixture of TestBadInputGetsAClear4xxAndChangesNothing.
const (
	res       = "gpu-tokens"  // TOKENS 1000 @daily; sessions live-1 (USING) and done-1 (FINISHED)
	otherRes  = "other-calls" // COUNT 100; session other-1 (USING)
	fullDaily = "full-daily"  // COUNT 10 @daily, all reserved
	fullNever = "full-never"  // COUNT 10, never resets, all reserved
	unknown   = "no-such-resource"
)

var fixtureResources = []string{res, otherRes, fullDaily, fullNever}

// badCase is one request that must be refused without changing anything.
type badCase struct {
	name  string // reads as a sentence
	req   request
	want  int
	code  string
	allow string                            // 405: the Allow header
	check func(*testing.T, *testAPI, reply) // extra assertions
}

// endpoint is a JSON-bodied operation with a valid body made of fields.
type endpoint struct {
	name, method, path string
	fields             []string // valid members, in order
}

func (e endpoint) req(body string) request {
	return request{method: e.method, path: e.path, body: body}
}

// with returns e's valid fields with key's member replaced by rawValue
// ("" removes it; a key not there is appended).
func (e endpoint) with(key, rawValue string) string {
	var out []string
	found := false
	for _, f := range e.fields {
		if strings.HasPrefix(f, str(key)+":") {
			found = true
			if rawValue != "" {
				out = append(out, kv(key, rawValue))
			}
			continue
		}
		out = append(out, f)
	}
	if !found && rawValue != "" {
		out = append(out, kv(key, rawValue))
	}
	return obj(out...)
}

var (
	apply     = endpoint{"apply", http.MethodPost, "/quota/apply", []string{kv("resourceName", str(res)), kv("applyAmount", "5")}}
	heartbeat = endpoint{"heartbeat", http.MethodPost, "/quota/heartbeat", []string{kv("resourceName", str(res)), kv("sessionId", str("live-1"))}}
	finish    = endpoint{"finish", http.MethodPost, "/quota/finish", []string{kv("resourceName", str(res)), kv("sessionId", str("live-1")), kv("actualUsedAmount", "3")}}
	putPolicy = endpoint{"PUT policy", http.MethodPut, "/admin/policies/" + res, []string{kv("quotaType", str("TOKENS")), kv("totalLimit", "1000"), kv("resetCron", str("@daily"))}}
	bodied    = []endpoint{apply, heartbeat, finish, putPolicy}
)

func badCases() []badCase {
	var cs []badCase
	bad := func(name string, req request) {
		cs = append(cs, badCase{name: name, req: req, want: http.StatusBadRequest, code: "INVALID_ARGUMENT"})
	}
	big := `{"resourceName":"` + strings.Repeat("a", 1<<20) + `"}`

	// Bodies that are not one strict JSON object of the right shape.
	for _, e := range bodied {
		valid := obj(e.fields...)
		bad(e.name+" refuses malformed JSON", e.req(valid[:len(valid)-1]))
		bad(e.name+" refuses JSON with unquoted keys", e.req(`{resourceName: 1}`))
		bad(e.name+" refuses a second JSON object after the first", e.req(valid+`{}`))
		bad(e.name+" refuses trailing garbage after the object", e.req(valid+` x`))
		bad(e.name+" refuses an unknown field", e.req(e.with("bogus", "1")))
		bad(e.name+" refuses a key given twice", e.req(obj(append(e.fields, e.fields[0])...)))
		bad(e.name+" refuses a key given twice in another letter case", e.req(obj(append(e.fields, strings.ToUpper(e.fields[0][:2])+e.fields[0][2:])...)))
		bad(e.name+" refuses a known key in another letter case", e.req(obj(append([]string{strings.ToUpper(e.fields[0][:4]) + e.fields[0][4:]}, e.fields[1:]...)...)))
		bad(e.name+" refuses an empty body", e.req(""))
		bad(e.name+" refuses a body of blanks", e.req(" \n\t "))
		for _, v := range []string{`[]`, `[` + valid + `]`, `"text"`, `42`, `true`, `null`} {
			bad(e.name+" refuses the JSON value "+abbrev(v)+" instead of an object", e.req(v))
		}
		// 415: what the body is said to be. A body said to be gzip (it is
		// not) or in Latin-1 was read as plain UTF-8 JSON and granted
		// (review of 4 December).
		for _, m := range []struct{ what, ctype, encoding string }{
			{"a text/plain body", "text/plain", ""},
			{"an unparsable Content-Type", "application/json; ==", ""},
			{"two Content-Type headers", "application/json\ntext/plain", ""},
			{"a gzip Content-Encoding", "", "gzip"},
			{"identity then br Content-Encodings", "", "identity, br"},
			{"a JSON body in charset latin1", "application/json; charset=latin1", ""},
		} {
			c := badCase{name: e.name + " refuses " + m.what + " with 415", want: http.StatusUnsupportedMediaType, code: "UNSUPPORTED_MEDIA_TYPE",
				req: request{method: e.method, path: e.path, body: valid, ctype: m.ctype, encoding: m.encoding}}
			if m.encoding != "" { // the answer says which coding is taken (RFC 9110 §15.5.16)
				c.check = func(t *testing.T, _ *testAPI, r reply) {
					if got := r.header.Get("Accept-Encoding"); got != "identity" {
						t.Errorf("Accept-Encoding = %q, want identity", got)
					}
				}
			}
			cs = append(cs, c)
		}
		cs = append(cs,
			badCase{name: e.name + " refuses a query parameter (only the body is read)", want: http.StatusBadRequest, code: "INVALID_ARGUMENT",
				req: request{method: e.method, path: e.path + "?resourceName=" + otherRes, body: valid}},
			badCase{name: e.name + " refuses a body over 1 MiB with Content-Length with 413", want: http.StatusRequestEntityTooLarge, code: "PAYLOAD_TOO_LARGE",
				req: request{method: e.method, path: e.path, body: big}},
			badCase{name: e.name + " refuses a chunked body over 1 MiB with 413", want: http.StatusRequestEntityTooLarge, code: "PAYLOAD_TOO_LARGE",
				req: request{method: e.method, path: e.path, body: big, chunked: true}},
		)
	}
	// Messages quote an unknown field's or parameter's name and a path:
	// at most quota.MaxMessageBytes of it comes back (it came back whole).
	short := func(t *testing.T, _ *testAPI, r reply) {
		if msg, _ := r.body["message"].(string); len(msg) > quota.MaxMessageBytes+64 {
			t.Errorf("message of %d bytes, want at most %d", len(msg), quota.MaxMessageBytes+64)
		}
	}
	long := strings.Repeat("k", 500<<10)
	cs = append(cs,
		badCase{name: "apply refuses a 500 KiB unknown field name with a short message", want: http.StatusBadRequest, code: "INVALID_ARGUMENT",
			req: apply.req(apply.with(long, "1")), check: short},
		badCase{name: "status refuses a 50 KiB unknown parameter with a short message", want: http.StatusBadRequest, code: "INVALID_ARGUMENT",
			req: request{method: http.MethodGet, path: "/quota/status?resourceName=" + res + "&" + long[:50<<10] + "=1"}, check: short},
		badCase{name: "GET of a 50 KiB unknown path answers 404 with a short message", want: http.StatusNotFound, code: "NOT_FOUND",
			req: request{method: http.MethodGet, path: "/" + long[:50<<10]}, check: short},
	)
	// Exactly 1 MiB is within the limit: refused for its content, not its size.
	exact := `{"resourceName":"` + strings.Repeat("a", 1<<20-len(`{"resourceName":""}`)) + `"}`
	bad("apply refuses a body of exactly 1 MiB for its content, not its size", apply.req(exact))

	// Amounts: JSON integers 1 … 2^53−1 (0 allowed where it means something).
	type amount struct {
		e        endpoint
		field    string
		zeroOK   bool // 0 is a valid value
		optional bool // absent (and null) is a valid value
	}
	notInts := []struct{ what, raw string }{
		{"a negative", "-1"}, {"a fractional", "1.5"}, {"a whole but decimal", "5.0"},
		{"an exponent", "1e3"}, {"an upper-case exponent", "2E2"}, {"a string", `"5"`}, {"-0 as", "-0"},
		{"a boolean", "true"}, {"an object", "{}"}, {"an array", "[5]"},
		{"2^53 as", "9007199254740992"}, {"-2^53 as", "-9007199254740992"},
		{"1e400 as", "1e400"}, {"a 20-digit", "99999999999999999999"}, {"a negative 20-digit", "-99999999999999999999"},
	}
	for _, a := range []amount{
		{e: apply, field: "applyAmount"},
		{e: apply, field: "minAmount", optional: true}, // absent = all or nothing; 0 is not "anything"
		{e: finish, field: "actualUsedAmount", zeroOK: true},
		{e: putPolicy, field: "totalLimit"},
		{e: putPolicy, field: "leakThresholdSeconds"},
	} {
		for _, v := range notInts {
			bad(a.e.name+" refuses "+v.what+" "+a.field, a.e.req(a.e.with(a.field, v.raw)))
		}
		if !a.zeroOK {
			bad(a.e.name+" refuses a zero "+a.field, a.e.req(a.e.with(a.field, "0")))
		}
		if !a.optional && a.field != "leakThresholdSeconds" {
			bad(a.e.name+" refuses a missing "+a.field, a.e.req(a.e.with(a.field, "")))
		}
		if !a.optional {
			bad(a.e.name+" refuses a null "+a.field, a.e.req(a.e.with(a.field, "null")))
		}
	}
	bad("apply refuses a minAmount above applyAmount", apply.req(apply.with("minAmount", "6")))
	bad("PUT policy refuses a leakThresholdSeconds over 7 days", putPolicy.req(putPolicy.with("leakThresholdSeconds", "604801")))

	// Names and ids.
	badNames := []struct{ what, v string }{
		{"an upper-case", "GPU"}, {"a spaced", "gpu tokens"}, {"a 65-character", strings.Repeat("a", 65)},
		{"a unicode", "résumé"}, {"a NUL-holding", "a\x00b"}, {"a tab-holding", "a\tb"}, {"a newline-holding", "a\nb"},
		{"a slash-holding", "a/b"}, {"an empty", ""},
		// No letter or digit (issue 11 §3.6): "." and ".." are path
		// segments, and such names only showed up in /metrics.
		{"a one-dot", "."}, {"a two-dot", ".."}, {"a three-dot", "..."}, {"a punctuation-only", "_-."},
	}
	for _, n := range badNames {
		for _, e := range []endpoint{apply, heartbeat, finish} {
			bad(e.name+" refuses "+n.what+" resourceName", e.req(e.with("resourceName", str(n.v))))
		}
		bad("status refuses "+n.what+" resourceName", request{method: http.MethodGet, path: "/quota/status?resourceName=" + url.QueryEscape(n.v)})
		if n.v != "" && n.v != "a/b" { // those are other routes
			p := "/admin/policies/" + url.PathEscape(n.v)
			bad("PUT policy refuses "+n.what+" name in the path", request{method: http.MethodPut, path: p, body: obj(putPolicy.fields...)})
			bad("GET policy refuses "+n.what+" name in the path", request{method: http.MethodGet, path: p})
		}
	}
	for _, e := range []endpoint{apply, heartbeat, finish} {
		bad(e.name+" refuses a numeric resourceName", e.req(e.with("resourceName", "5")))
		bad(e.name+" refuses a null resourceName", e.req(e.with("resourceName", "null")))
	}
	for _, e := range []endpoint{heartbeat, finish} {
		bad(e.name+" refuses a missing resourceName", e.req(e.with("resourceName", "")))
		bad(e.name+" refuses a missing sessionId", e.req(e.with("sessionId", "")))
		bad(e.name+" refuses an empty sessionId", e.req(e.with("sessionId", `""`)))
	}
	for _, id := range []struct{ what, v string }{
		{"a 65-character", strings.Repeat("s", 65)}, {"a spaced", "live 1"}, {"a unicode", "sé"},
		{"a slash-holding", "a/b"}, {"a NUL-holding", "a\x00b"},
	} {
		for _, e := range []endpoint{apply, heartbeat, finish} {
			bad(e.name+" refuses "+id.what+" sessionId", e.req(e.with("sessionId", str(id.v))))
		}
	}
	// "" is not "absent": read as absent it made a new session on every
	// retry of a caller that believed it sent an idempotency key.
	bad("apply refuses an empty sessionId", apply.req(apply.with("sessionId", `""`)))
	bad("apply refuses a 129-character clientId", apply.req(apply.with("clientId", str(strings.Repeat("c", 129)))))
	bad("apply refuses a spaced clientId", apply.req(apply.with("clientId", str("svc a"))))
	bad("apply refuses a numeric clientId", apply.req(apply.with("clientId", "7")))

	// Policies.
	for _, p := range []struct{ what, key, raw string }{
		{"an unknown quotaType", "quotaType", str("SECONDS")},
		{"a lower-case quotaType", "quotaType", str("tokens")},
		{"a missing quotaType", "quotaType", ""},
		{"an unparsable resetCron", "resetCron", str("not a cron")},
		{"an out-of-range resetCron", "resetCron", str("61 * * * *")},
		{"a resetCron that never fires", "resetCron", str("0 0 30 2 *")},
		{"a zero @every resetCron", "resetCron", str("@every 0s")},
		{"a resetCron carrying its own zone", "resetCron", str("CRON_TZ=Asia/Tokyo 0 0 * * *")},
		{"the timezone Mars/Base", "timezone", str("Mars/Base")},
		{"the timezone Local", "timezone", str("Local")},
		{"a timezone given as a file path", "timezone", str("/etc/localtime")},
		{"a timezone escaping the zone directory", "timezone", str("../UTC")},
		{"a resourceName that does not match the path", "resourceName", str(otherRes)},
	} {
		bad("PUT policy refuses "+p.what, putPolicy.req(putPolicy.with(p.key, p.raw)))
	}

	// Status query strings.
	bad("status refuses an unknown query parameter", request{method: http.MethodGet, path: "/quota/status?resourceName=" + res + "&verbose=1"})
	bad("status refuses a repeated resourceName", request{method: http.MethodGet, path: "/quota/status?resourceName=" + res + "&resourceName=" + res})
	bad("status refuses a resourceName parameter in another letter case", request{method: http.MethodGet, path: "/quota/status?resourcename=" + res})
	bad("status refuses a missing resourceName", request{method: http.MethodGet, path: "/quota/status"})
	// url.Values drops a pair it cannot parse; status answered for the rest.
	bad("status refuses a malformed escape next to a valid resourceName", request{method: http.MethodGet, path: "/quota/status?resourceName=" + res + "&x=%zz"})
	bad("status refuses a semicolon-separated parameter next to a valid resourceName", request{method: http.MethodGet, path: "/quota/status?resourceName=" + res + ";verbose=1"})

	// Well-formed requests the state refuses.
	noSeries := func(t *testing.T, h *testAPI, _ reply) {
		for _, s := range h.scrape(t) {
			if s.labels["resource"] == unknown {
				t.Errorf("the refused request created the series %s%v", s.name, s.labels)
			}
		}
	}
	for _, e := range []endpoint{apply, heartbeat, finish} {
		cs = append(cs, badCase{name: e.name + " answers 404 for an unknown resource", req: e.req(e.with("resourceName", str(unknown))),
			want: http.StatusNotFound, code: "RESOURCE_NOT_FOUND", check: noSeries})
	}
	cs = append(cs,
		badCase{name: "status answers 404 for an unknown resource", req: request{method: http.MethodGet, path: "/quota/status?resourceName=" + unknown},
			want: http.StatusNotFound, code: "RESOURCE_NOT_FOUND"},
		badCase{name: "GET policy answers 404 for an unknown resource", req: request{method: http.MethodGet, path: "/admin/policies/" + unknown},
			want: http.StatusNotFound, code: "RESOURCE_NOT_FOUND"},
		badCase{name: "apply with minAmount answers 404 for an unknown resource", req: request{method: http.MethodPost, path: "/quota/apply",
			body: obj(kv("resourceName", str(unknown)), kv("applyAmount", "5"), kv("minAmount", "1"), kv("clientId", str("c")))},
			want: http.StatusNotFound, code: "RESOURCE_NOT_FOUND"},
	)
	for _, e := range []endpoint{heartbeat, finish} {
		cs = append(cs,
			badCase{name: e.name + " answers 404 for an unknown session", req: e.req(e.with("sessionId", str("no-such-session"))),
				want: http.StatusNotFound, code: "SESSION_NOT_FOUND"},
			badCase{name: e.name + " answers 404 for a session of another resource", req: e.req(e.with("sessionId", str("other-1"))),
				want: http.StatusNotFound, code: "SESSION_NOT_FOUND"},
		)
	}
	cs = append(cs,
		badCase{name: "heartbeat answers 409 with the status for a finished session",
			req: heartbeat.req(heartbeat.with("sessionId", str("done-1"))), want: http.StatusConflict, code: "SESSION_NOT_ACTIVE",
			check: func(t *testing.T, _ *testAPI, r reply) {
				if r.body["status"] != "FINISHED" {
					t.Errorf(`body status = %v, want "FINISHED": %s`, r.body["status"], r.raw)
				}
			}},
		badCase{name: "apply answers 409 for a repeated session id with another amount",
			req:  apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "11"), kv("sessionId", str("live-1")), kv("clientId", str("svc-a")))),
			want: http.StatusConflict, code: "SESSION_CONFLICT"},
		// (The same session id on another resource is a session of its
		// own since ids are scoped to client and resource, issue 11 §3.5.)
		badCase{name: "heartbeat answers 400 for an invalid clientId",
			req:  heartbeat.req(obj(kv("resourceName", str(res)), kv("sessionId", str("live-1")), kv("clientId", str("bad client")))),
			want: http.StatusBadRequest, code: "INVALID_ARGUMENT"},
		badCase{name: "finish answers 409 for a finished session repeated with another amount",
			req:  finish.req(obj(kv("resourceName", str(res)), kv("sessionId", str("done-1")), kv("actualUsedAmount", "5"))),
			want: http.StatusConflict, code: "SESSION_CONFLICT"},
		badCase{name: "apply answers 429 with Retry-After when the exhausted policy resets",
			req:  apply.req(obj(kv("resourceName", str(fullDaily)), kv("applyAmount", "1"))),
			want: http.StatusTooManyRequests, code: "QUOTA_EXHAUSTED", check: exhausted(true)},
		badCase{name: "apply with minAmount answers 429 when nothing at all is left",
			req:  apply.req(obj(kv("resourceName", str(fullDaily)), kv("applyAmount", "5"), kv("minAmount", "1"))),
			want: http.StatusTooManyRequests, code: "QUOTA_EXHAUSTED", check: exhausted(true)},
		badCase{name: "apply answers 429 without Retry-After when the exhausted policy never resets",
			req:  apply.req(obj(kv("resourceName", str(fullNever)), kv("applyAmount", "1"))),
			want: http.StatusTooManyRequests, code: "QUOTA_EXHAUSTED", check: exhausted(false)},
		badCase{name: "apply answers 429 for more than the whole limit",
			req:  apply.req(obj(kv("resourceName", str(res)), kv("applyAmount", "9007199254740991"))),
			want: http.StatusTooManyRequests, code: "QUOTA_EXHAUSTED"},
	)

	// Routing.
	for _, m := range []struct{ method, path, allow string }{
		{http.MethodGet, "/quota/apply", "POST"},
		{http.MethodPut, "/quota/heartbeat", "POST"},
		{http.MethodDelete, "/quota/finish", "POST"},
		{http.MethodPost, "/quota/status", "GET, HEAD"},
		{http.MethodPost, "/admin/policies", "GET, HEAD"},
		{http.MethodPost, "/admin/policies/" + res, "GET, HEAD, PUT, PATCH, DELETE"},
		{http.MethodPut, "/admin/policies/" + res + "/reset", "POST"},
		{http.MethodPost, "/admin/policies/a%2Fb", "GET, HEAD, PUT, PATCH, DELETE"},
		{"BREW", "/quota/apply", "POST"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
	} {
		cs = append(cs, badCase{name: m.method + " " + m.path + " answers 405 naming " + m.allow,
			req:  request{method: m.method, path: m.path, body: obj(apply.fields...)},
			want: http.StatusMethodNotAllowed, code: "METHOD_NOT_ALLOWED", allow: m.allow})
	}
	for _, p := range []string{"/", "/nope", "/quota/applyx", "/quota/apply/extra", "/admin/policies/a/b", "/QUOTA/STATUS"} {
		cs = append(cs, badCase{name: "GET " + p + " answers 404 as an unknown route",
			req: request{method: http.MethodGet, path: p}, want: http.StatusNotFound, code: "NOT_FOUND"})
	}
	cs = append(cs, badCase{name: "PUT policy with an empty name in the path answers 404 as an unknown route",
		req: request{method: http.MethodPut, path: "/admin/policies/", body: obj(putPolicy.fields...)}, want: http.StatusNotFound, code: "NOT_FOUND"})
	cs = append(cs, badCase{name: "POST to an unknown route answers 404 as an unknown route",
		req: request{method: http.MethodPost, path: "/quota/apply2", body: obj(apply.fields...)}, want: http.StatusNotFound, code: "NOT_FOUND"})
	return cs
}

// exhausted checks a 429 body and its Retry-After.
func exhausted(resets bool) func(*testing.T, *testAPI, reply) {
	return func(t *testing.T, _ *testAPI, r reply) {
		if rem := num(t, r, "remainingQuota"); rem != 0 {
			t.Errorf("remainingQuota = %d, want 0", rem)
		}
		ra := r.header.Get("Retry-After")
		if !resets {
			if ra != "" || r.body["nextResetAt"] != nil {
				t.Errorf("a policy that never resets got Retry-After %q, nextResetAt %v", ra, r.body["nextResetAt"])
			}
			return
		}
		secs, err := strconv.Atoi(ra)
		if err != nil || secs < 1 || secs > 24*3600 {
			t.Errorf("Retry-After = %q, want whole seconds in 1 … 86400 to the next daily reset", ra)
		}
		if _, ok := r.body["nextResetAt"].(string); !ok {
			t.Errorf("nextResetAt missing: %s", r.raw)
		}
	}
}

func abbrev(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// setupFixture creates the resources and sessions the cases refer to.
func setupFixture(t *testing.T, h *testAPI) {
	t.Helper()
	h.putPolicy(t, res, obj(putPolicy.fields...))
	h.putPolicy(t, otherRes, `{"quotaType":"COUNT","totalLimit":100}`)
	h.putPolicy(t, fullDaily, `{"quotaType":"COUNT","totalLimit":10,"resetCron":"@daily"}`)
	h.putPolicy(t, fullNever, `{"quotaType":"COUNT","totalLimit":10}`)
	for _, body := range []string{
		obj(kv("resourceName", str(res)), kv("applyAmount", "10"), kv("sessionId", str("live-1")), kv("clientId", str("svc-a"))),
		obj(kv("resourceName", str(res)), kv("applyAmount", "10"), kv("sessionId", str("done-1"))),
		obj(kv("resourceName", str(otherRes)), kv("applyAmount", "1"), kv("sessionId", str("other-1"))),
		obj(kv("resourceName", str(fullDaily)), kv("applyAmount", "10")),
		obj(kv("resourceName", str(fullNever)), kv("applyAmount", "10")),
	} {
		h.mustOK(t, apply.req(body))
	}
	h.mustOK(t, finish.req(obj(kv("resourceName", str(res)), kv("sessionId", str("done-1")), kv("actualUsedAmount", "4"))))
}

// snapshot is everything a refused request must leave as it was: the policy
// list and every fixture resource's status, byte for byte.
func snapshot(t *testing.T, h *testAPI) []byte {
	t.Helper()
	var b bytes.Buffer
	b.Write(h.mustOK(t, request{method: http.MethodGet, path: "/admin/policies"}).raw)
	for _, r := range fixtureResources {
		b.Write(h.status(t, r).raw)
	}
	return b.Bytes()
}

func TestBadInputGetsAClear4xxAndChangesNothing(t *testing.T) {
	h := newHarness(t)
	setupFixture(t, h)
	for _, c := range badCases() {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, h)
			r := h.do(t, c.req)
			assertError(t, r, c.want, c.code)
			if c.allow != "" {
				if got := r.header.Get("Allow"); got != c.allow {
					t.Errorf("Allow = %q, want %q", got, c.allow)
				}
			}
			if c.check != nil {
				c.check(t, h, r)
			}
			if after := snapshot(t, h); !bytes.Equal(before, after) {
				t.Errorf("the refused request changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	t.Run("no metric series names a resource without a policy", func(t *testing.T) {
		known := map[string]bool{}
		for _, r := range fixtureResources {
			known[r] = true
		}
		for _, s := range h.scrape(t) {
			if v, ok := s.labels["resource"]; ok && !known[v] {
				t.Errorf("series %s%v names resource %q, which has no policy", s.name, s.labels, v)
			}
		}
	})
}

// assertError checks an error answer: status, JSON content type, and the
// body {success:false, code, message}.
func assertError(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, abbrevBytes(r.raw))
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if r.body == nil {
		t.Fatalf("body is not a JSON object: %s", abbrevBytes(r.raw))
	}
	if r.body["success"] != false || r.body["code"] != code {
		t.Errorf("body success=%v code=%v, want false %s: %s", r.body["success"], r.body["code"], code, r.raw)
	}
	if msg, _ := r.body["message"].(string); msg == "" {
		t.Errorf("body has no message: %s", r.raw)
	}
	if ra := r.header.Get("Retry-After"); ra != "" && status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		t.Errorf("Retry-After %q on a %d", ra, status)
	}
}

func abbrevBytes(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
