package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis and the MySQL driver keep pool goroutines of clients the
		// tests close only at exit; opencensus-free grpc leaves none.
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
		// fasthttp (the HTTP engine, internal/httpserve) refreshes its Date
		// header on one goroutine per process, never stopped.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

const (
	over = rls.RateLimitResponse_OVER_LIMIT
	ok   = rls.RateLimitResponse_OK
)

// One descriptor charged its hits: OK with the limit, what remains and the
// time to the reset, the x-ratelimit-* headers; OVER_LIMIT once it does not
// fit, with nothing charged; one FINISHED ledger row per charge.
func TestChargesAnswerLimitRemainingResetAndHeaders(t *testing.T) {
	forModes(t, func(t *testing.T, mode testenv.Mode) {
		r := testenv.Resource(t)
		g := startGW(t, mode, fmt.Sprintf(`
response_headers: true
domains:
  - domain: llm
    descriptors:
      - key: generic_key
        value: chat
        resource: %s
`, r))
		g.policy(t, r, 3, map[string]any{"quotaType": "COUNT"})

		resp := g.must(t, "llm", desc(2, "generic_key", "chat"))
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != ok || st.GetLimitRemaining() != 1 || st.GetCurrentLimit().GetRequestsPerUnit() != 3 ||
			st.GetCurrentLimit().GetName() != r || st.GetCurrentLimit().GetUnit() != rls.RateLimitResponse_RateLimit_DAY {
			t.Fatalf("first charge: %v", resp)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > 24*3600e9 {
			t.Fatalf("duration until reset %s", d)
		}
		h := map[string]string{}
		for _, hv := range resp.GetResponseHeadersToAdd() {
			h[hv.GetKey()] = hv.GetValue()
		}
		if h["x-ratelimit-limit"] != "3" || h["x-ratelimit-remaining"] != "1" || h["x-ratelimit-reset"] == "" {
			t.Fatalf("headers %v", h)
		}

		resp = g.must(t, "llm", desc(2, "generic_key", "chat"))
		if codesOf(resp) != "OVER_LIMIT OVER_LIMIT" || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
			t.Fatalf("over the limit: %v", resp)
		}
		if u, _ := g.used(t, r); u != 2 {
			t.Fatalf("used %d after a refusal, want 2", u)
		}
		// hits_addend unset: the request's, at least 1.
		resp = g.must(t, "llm", desc(-1, "generic_key", "chat"))
		if codesOf(resp) != "OK OK" || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("default hit: %v", resp)
		}
		if charged, rows := g.ledgerCharged(t, r); charged != 3 || rows != 2 {
			t.Fatalf("ledger: %d charged in %d rows, want 3 in 2", charged, rows)
		}
		// A descriptor no mapping matches is OK and charges nothing.
		resp = g.must(t, "llm", desc(5, "generic_key", "other"))
		if codesOf(resp) != "OK OK" || resp.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Fatalf("unmatched: %v", resp)
		}
	})
}

// Several descriptors are all or nothing: if one does not fit, none is
// charged; two descriptors of one resource must fit together.
func TestSeveralDescriptorsAreAllOrNothing(t *testing.T) {
	forModes(t, func(t *testing.T, mode testenv.Mode) {
		a, b := testenv.Resource(t), testenv.Resource(t)
		g := startGW(t, mode, fmt.Sprintf(`
domains:
  - domain: d
    descriptors:
      - {key: user, value: u1, resource: %s}
      - {key: model, value: big, resource: %s}
      - {key: model, value: also-a, resource: %s}
`, a, b, a))
		g.policy(t, a, 10, nil)
		g.policy(t, b, 1, nil)

		resp := g.must(t, "d", desc(2, "user", "u1"), desc(2, "model", "big"))
		if codesOf(resp) != "OVER_LIMIT OK OVER_LIMIT" || resp.GetStatuses()[0].GetLimitRemaining() != 10 {
			t.Fatalf("one over: %v", resp)
		}
		if ua, _ := g.used(t, a); ua != 0 {
			t.Fatalf("%s charged %d though the request was refused", a, ua)
		}
		if _, rows := g.ledgerCharged(t, a); rows != 0 {
			t.Fatalf("ledger rows after a refusal: %d", rows)
		}
		resp = g.must(t, "d", desc(6, "user", "u1"), desc(6, "model", "also-a"))
		if resp.GetOverallCode() != over {
			t.Fatalf("6+6 on a limit of 10: %v", resp)
		}
		resp = g.must(t, "d", desc(4, "user", "u1"), desc(1, "model", "big"), desc(5, "model", "also-a"))
		if codesOf(resp) != "OK OK OK OK" {
			t.Fatalf("all fit: %v", resp)
		}
		ua, _ := g.used(t, a)
		ub, _ := g.used(t, b)
		if ua != 9 || ub != 1 {
			t.Fatalf("used %d and %d, want 9 and 1", ua, ub)
		}
	})
}

// A shadow mapping is charged (past the limit too) but never answers
// OVER_LIMIT.
func TestShadowModeChargesButNeverRefuses(t *testing.T) {
	forModes(t, func(t *testing.T, mode testenv.Mode) {
		g, r := startOne(t, mode, 1, "shadow_mode: true")
		for range 2 {
			if resp := g.must(t, "d", desc(3, "k", "v")); codesOf(resp) != "OK OK" {
				t.Fatalf("shadow: %v", resp)
			}
		}
		if u, rem := g.used(t, r); u != 6 || rem != -5 {
			t.Fatalf("used %d remaining %d, want 6 and -5", u, rem)
		}
	})
}

// A token budget as Envoy AI Gateway drives it: hits_addend 0 on the
// request asks whether anything is left; the response's token count is
// charged even past the limit (overage), after which the check refuses.
func TestTokenBudgetChecksOnRequestAndChargesOverageOnResponse(t *testing.T) {
	forModes(t, func(t *testing.T, mode testenv.Mode) {
		g, r := startOne(t, mode, 100, "usage: true")
		if resp := g.must(t, "d", desc(0, "k", "v")); codesOf(resp) != "OK OK" || resp.GetStatuses()[0].GetLimitRemaining() != 100 {
			t.Fatalf("check with budget left: %v", resp)
		}
		if resp := g.must(t, "d", desc(150, "k", "v")); codesOf(resp) != "OK OK" || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("response charge past the limit: %v", resp)
		}
		if u, rem := g.used(t, r); u != 150 || rem != -50 {
			t.Fatalf("used %d remaining %d, want 150 and -50", u, rem)
		}
		var overage int64
		if err := g.Ledger.QueryRow(`SELECT COALESCE(SUM(overage_amount), 0) FROM quota_usage WHERE resource_name = ?`, r).Scan(&overage); err != nil || overage != 50 {
			t.Fatalf("ledger overage %d (%v), want 50", overage, err)
		}
		if resp := g.must(t, "d", desc(0, "k", "v")); codesOf(resp) != "OVER_LIMIT OVER_LIMIT" {
			t.Fatalf("check with nothing left: %v", resp)
		}
	})
}

// A value-less key makes one resource per value from the template, up to
// max_resources; past the cap, or outside an allow-list, the descriptor is
// refused and no resource is made.
func TestWildcardResourcesAreBoundedByTheCapAndTheAllowList(t *testing.T) {
	forModes(t, func(t *testing.T, mode testenv.Mode) {
		tpl := testenv.Resource(t)
		sfx := testenv.RandomSuffix()
		g := startGW(t, mode, fmt.Sprintf(`
domains:
  - domain: d
    descriptors:
      - key: tenant
        resource: t-{value}-%s
        template: %s
        max_resources: 2
      - key: model
        resource: m-{value}-%s
        template: %s
        values: [small]
`, sfx, tpl, sfx, tpl))
		g.policy(t, tpl, 5, nil)
		for _, v := range []string{"a", "b", "a"} {
			if resp := g.must(t, "d", desc(1, "tenant", v)); codesOf(resp) != "OK OK" || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
				t.Fatalf("tenant %s: %v", v, resp)
			}
		}
		if u, _ := g.used(t, "t-a-"+sfx); u != 2 {
			t.Fatalf("t-a used %d, want 2", u)
		}
		if resp := g.must(t, "d", desc(1, "tenant", "c")); codesOf(resp) != "OVER_LIMIT OVER_LIMIT" {
			t.Fatalf("past the cap: %v", resp)
		}
		if code, _ := g.httpCall(t, http.MethodGet, "/admin/policies/t-c-"+sfx, nil); code != http.StatusNotFound {
			t.Fatalf("a resource past the cap was made: %d", code)
		}
		if resp := g.must(t, "d", desc(1, "model", "small")); codesOf(resp) != "OK OK" {
			t.Fatalf("allowed value: %v", resp)
		}
		if resp := g.must(t, "d", desc(1, "model", "huge")); codesOf(resp) != "OVER_LIMIT OVER_LIMIT" {
			t.Fatalf("value outside the allow-list: %v", resp)
		}
		_, err := g.ask(t, "", "d", desc(1, "tenant", "Not/A-Name"))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a value that cannot be a resource name: %v", err)
		}
	})
}

// Bad requests get the status an operator can act on, and change nothing.
func TestBadRequestsAreRefusedWithActionableStatusesAndChangeNothing(t *testing.T) {
	forModes(t, func(t *testing.T, mode testenv.Mode) {
		g, r := startOne(t, mode, 10, "")
		for name, c := range map[string]struct {
			domain string
			req    func() (*rls.RateLimitResponse, error)
			want   codes.Code
		}{
			"no descriptors": {want: codes.InvalidArgument, req: func() (*rls.RateLimitResponse, error) { return g.ask(t, "", "d") }},
			"unknown domain": {want: codes.NotFound, req: func() (*rls.RateLimitResponse, error) { return g.ask(t, "", "nope", desc(1, "k", "v")) }},
			// The message quotes the domain: it was sent back whole (3 MiB).
			"unknown domain of 3 MiB": {want: codes.NotFound, req: func() (*rls.RateLimitResponse, error) {
				return g.ask(t, "", strings.Repeat("x", 3<<20), desc(1, "k", "v"))
			}},
			"empty domain": {want: codes.InvalidArgument, req: func() (*rls.RateLimitResponse, error) { return g.ask(t, "", "", desc(1, "k", "v")) }},
			"empty key": {want: codes.InvalidArgument, req: func() (*rls.RateLimitResponse, error) {
				return g.ask(t, "", "d", desc(1, "k", "v"), desc(1, "", "v"))
			}},
			"no entries": {want: codes.InvalidArgument, req: func() (*rls.RateLimitResponse, error) { return g.ask(t, "", "d", desc(1)) }},
			"hits past 2^53-1": {want: codes.InvalidArgument, req: func() (*rls.RateLimitResponse, error) {
				return g.ask(t, "", "d", desc(1, "k", "v"), desc(1<<53, "k", "v"))
			}},
		} {
			resp, err := c.req()
			if msg := status.Convert(err).Message(); status.Code(err) != c.want || msg == "" || len(msg) > quota.MaxMessageBytes+64 {
				t.Errorf("%s: %v %.200v (message of %d bytes), want %s with a message of at most %d bytes", name, resp, err, len(msg), c.want, quota.MaxMessageBytes+64)
			}
		}
		if u, _ := g.used(t, r); u != 0 {
			t.Fatalf("bad requests charged %d", u)
		}
	})
}

// API keys in metadata, checked against QC_API_KEYS: none or an unknown
// one is UNAUTHENTICATED, a key for other resources PERMISSION_DENIED; the
// ledger row carries the key's client.
func TestAPIKeysAuthenticateAndAuthorize(t *testing.T) {
	r, other := testenv.Resource(t), testenv.Resource(t)
	const key, otherKey = "gw-key-aaaaaaaaaaaaaaaa", "gw-key-bbbbbbbbbbbbbbbb"
	g := startGW(t, testenv.Dev, fmt.Sprintf(`
domains:
  - domain: d
    descriptors:
      - {key: k, value: v, resource: %s}
`, r), "--api-keys", fmt.Sprintf("%s=gw-client:%s;%s=other-client:%s", key, r, otherKey, other))
	g.key = key
	g.policy(t, r, 10, nil)
	for name, c := range map[string]struct {
		key  string
		want codes.Code
	}{
		"no key":            {"", codes.Unauthenticated},
		"unknown key":       {"gw-key-zzzzzzzzzzzzzzzz", codes.Unauthenticated},
		"key of other work": {otherKey, codes.PermissionDenied},
	} {
		if _, err := g.ask(t, c.key, "d", desc(1, "k", "v")); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %s", name, err, c.want)
		}
	}
	if resp, err := g.ask(t, key, "d", desc(2, "k", "v")); err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("with the key: %v %v", resp, err)
	}
	var client string
	if err := g.Ledger.QueryRow(`SELECT client_id FROM quota_usage WHERE resource_name = ?`, r).Scan(&client); err != nil || client != "gw-client" {
		t.Fatalf("ledger client %q (%v)", client, err)
	}
	if u, _ := g.used(t, r); u != 2 {
		t.Fatalf("used %d, want 2 (refused calls charge nothing)", u)
	}
}

// Concurrent first requests of new values make no more resources than the
// cap: exactly max_resources of them are answered OK.
func TestTheCapHoldsUnderConcurrentNewValues(t *testing.T) {
	tpl := testenv.Resource(t)
	sfx := testenv.RandomSuffix()
	g := startGW(t, testenv.Dev, fmt.Sprintf(`
domains:
  - domain: d
    descriptors:
      - {key: tenant, resource: 'c-{value}-%s', template: %s, max_resources: 3}
`, sfx, tpl))
	g.policy(t, tpl, 5, nil)
	results := make(chan rls.RateLimitResponse_Code, 8)
	for i := range 8 {
		go func() {
			resp, err := g.ask(t, "", "d", desc(1, "tenant", fmt.Sprintf("v%d", i)))
			if err != nil {
				t.Error(err)
			}
			results <- resp.GetOverallCode()
		}()
	}
	oks := 0
	for range 8 {
		if <-results == ok {
			oks++
		}
	}
	if oks != 3 {
		t.Fatalf("%d new values answered OK with max_resources 3", oks)
	}
}
