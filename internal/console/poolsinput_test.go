package console_test

import (
	"context"
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Bad input on every pools form of the console (grant, release, void,
// pool settings, reclaim steps), posted by a client that asks for JSON,
// is answered with a 4xx and the API's JSON error body (the code of the
// status and a message saying what is wrong), and changes nothing: the
// settings, the lines, the grants and the reclaims read the same after.
func TestConsolePoolsFormsAnswerBadInputWithJSON(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-ivy:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, grantID := pooledResource(t, s, c)
	post, csrf := jsonPoster(t, s.URL+"/admin/ui")
	snapshot := func() []any {
		p, err1 := c.Pools(ctx, res)
		st, err2 := c.Status(ctx, res)
		gs, err3 := c.Grants(ctx, res)
		rs, err4 := c.Reclaims(ctx, res)
		if err := firstErr(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		return []any{p, st.Pools, gs, rs}
	}
	before := snapshot()
	ok := func(more ...string) url.Values {
		v := url.Values{"reason": {"ops"}, "confirm": {"yes"}, "csrf": {csrf}}
		for i := 0; i+1 < len(more); i += 2 {
			v.Set(more[i], more[i+1])
		}
		return v
	}
	until := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
	past := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
	settings := func(edit ...string) url.Values {
		return ok(append([]string{"shared", "60", "dedicated", "30", "buffer", "10", "borrow", "50", "elasticity", "OFF",
			"reclaimat", "90", "confirmafter", "30"}, edit...)...)
	}
	r := "/resources/" + res
	for _, tc := range []struct {
		name, path string
		form       url.Values
		want       int
	}{
		{"grant of 0", r + "/grant", ok("amount", "0", "until", until), 400},
		{"grant of letters", r + "/grant", ok("amount", "lots", "until", until), 400},
		{"grant of -5", r + "/grant", ok("amount", "-5", "until", until), 400},
		{"grant until a bad time", r + "/grant", ok("amount", "5", "until", "tomorrow"), 400},
		{"grant until the past", r + "/grant", ok("amount", "5", "until", past), 400},
		{"grant without an end", r + "/grant", ok("amount", "5"), 400},
		{"grant to an unknown line", r + "/grant", ok("amount", "5", "until", until, "line", "zz"), 400},
		{"grant with a control character in its reason", r + "/grant", ok("amount", "5", "until", until, "reason", "a\x07b"), 400},
		{"grant without a reason", r + "/grant", ok("amount", "5", "until", until, "reason", " "), 400},
		{"grant not confirmed", r + "/grant", ok("amount", "5", "until", until, "confirm", "no"), 400},
		{"grant with the amount twice", r + "/grant", func() url.Values {
			v := ok("until", until)
			v["amount"] = []string{"5", "6"}
			return v
		}(), 400},
		{"release above the buffer", r + "/release", ok("amount", "1001"), 409},
		{"release to an unknown line", r + "/release", ok("amount", "5", "line", "zz"), 400},
		{"release of 1e3", r + "/release", ok("amount", "1e3"), 400},
		{"void an unknown grant", r + "/grants/g-none/void", ok(), 404},
		{"void not confirmed", r + "/grants/" + grantID + "/void", ok("confirm", "no"), 400},
		{"settings not summing to 100", r + "/pools", settings("shared", "70"), 400},
		{"settings with a borrowing limit of 1001", r + "/pools", settings("borrow", "1001"), 400},
		{"settings with an unknown elasticity", r + "/pools", settings("elasticity", "SOMETIMES"), 400},
		{"settings with a missing number", r + "/pools", func() url.Values { v := settings(); v.Del("reclaimat"); return v }(), 400},
		{"settings of an unknown resource", "/resources/" + res + "-none/pools", settings(), 404},
		{"reclaim step unknown", r + "/reclaims/" + res + "-r1/bogus", ok(), 404},
		{"reclaim unknown", r + "/reclaims/r-none/confirm", ok(), 404},
		{"reclaim confirm not confirmed", r + "/reclaims/" + res + "-r1/confirm", ok("confirm", "no"), 400},
		{"reclaim cancel without the CSRF token", r + "/reclaims/" + res + "-r1/cancel", ok("csrf", "0"), 403},
	} {
		code, body, err := post(tc.path, tc.form)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Success *bool  `json:"success"`
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if code != tc.want || json.Unmarshal([]byte(body), &e) != nil || e.Success == nil || *e.Success || e.Code == "" || e.Message == "" {
			t.Errorf("%s: %d %q, want %d with the JSON error body", tc.name, code, body, tc.want)
		}
		if wantCode := map[int]string{400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "CONFLICT"}[tc.want]; e.Code != wantCode {
			t.Errorf("%s: code %q, want %q", tc.name, e.Code, wantCode)
		}
	}
	if after := snapshot(); !reflect.DeepEqual(after, before) {
		t.Fatalf("bad input changed the pools:\nbefore %+v\nafter  %+v", before, after)
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
