package app_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Usage (groupBy=line) and the session map by business line (issue 10 §1,
// "and line once business lines exist"), on both backends: live sessions
// carry their line from Redis, settled ones from the ledger, and a session
// from before the resource had lines sums into the line "".
func TestUsageAndSessionMapByBusinessLine(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 100000})
		apply := func(line string, amount int64) string {
			t.Helper()
			body := map[string]any{"resourceName": res, "applyAmount": amount, "clientId": "svc"}
			if line != "" {
				body["businessLine"] = line
			}
			code, out, _ := call(t, s, http.MethodPost, "/quota/apply", body)
			if code != http.StatusOK {
				t.Fatalf("apply on line %q: %d %v", line, code, out)
			}
			return out["sessionId"].(string)
		}
		before := apply("", 10) // before the resource has lines
		for line, spec := range map[string]map[string]any{
			"search": {"tier": "CORE", "weight": 3}, "ads": {"tier": "EXPLORE", "weight": 1},
		} {
			if code, out, _ := call(t, s, http.MethodPut, "/admin/policies/"+res+"/lines/"+line, spec); code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("put line %s: %d %v", line, code, out)
			}
		}
		s1, _, a1 := apply("search", 100), apply("search", 200), apply("ads", 50)
		for _, f := range []struct {
			id     string
			actual int64
		}{{s1, 60}, {a1, 50}, {before, 10}} {
			if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: f.id, ActualUsedAmount: f.actual}); err != nil {
				t.Fatal(err)
			}
		}

		rep, err := c.Usage(ctxOf(t), client.UsageQuery{ResourceName: res, GroupBy: "line"})
		if err != nil {
			t.Fatal(err)
		}
		if rep.GroupBy != "line" || len(rep.Groups) != 3 {
			t.Fatalf("usage by line: %+v", rep)
		}
		byLine := map[string]client.UsageGroup{}
		for _, g := range rep.Groups {
			if g.ClientID != "" || g.Start != nil {
				t.Errorf("line group with a client or start: %+v", g)
			}
			byLine[g.BusinessLine] = g
		}
		if g := byLine["search"]; g.Sessions != 2 || g.OpenSessions != 1 || g.GrantedAmount != 300 || g.ChargedAmount != 60 || g.ReservedAmount != 200 {
			t.Errorf("search: %+v", g)
		}
		if g := byLine["ads"]; g.Sessions != 1 || g.OpenSessions != 0 || g.ChargedAmount != 50 {
			t.Errorf("ads: %+v", g)
		}
		if g := byLine[""]; g.Sessions != 1 || g.ChargedAmount != 10 {
			t.Errorf("no line: %+v", g)
		}
		// The raw answer names the key businessLine, also when it is "".
		code, raw, _ := call(t, s, http.MethodGet, "/admin/usage?groupBy=line&resourceName="+res, nil)
		groups, _ := raw["groups"].([]any)
		if code != 200 || len(groups) != 3 {
			t.Fatalf("usage by line: %d %v", code, raw)
		}
		if k, ok := groups[0].(map[string]any)["businessLine"]; !ok || k != "" {
			t.Errorf("first group %v: want businessLine \"\" (keys in order)", groups[0])
		}

		for _, tc := range []struct {
			line, status string
			want         int
		}{{"search", "", 2}, {"search", "USING", 1}, {"search", "FINISHED", 1}, {"ads", "", 1}, {"ads", "USING", 0}} {
			got := allSessions(t, c, client.SessionQuery{ResourceName: res, BusinessLine: tc.line, Status: tc.status, Limit: 1})
			if len(got) != tc.want {
				t.Errorf("line %s status %q: %d sessions, want %d", tc.line, tc.status, len(got), tc.want)
			}
			for _, x := range got {
				if x.BusinessLine != tc.line {
					t.Errorf("line %s: got a session of %q: %+v", tc.line, x.BusinessLine, x)
				}
			}
		}
		all, err := c.Sessions(ctxOf(t), client.SessionQuery{ResourceName: res})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range all.Sessions {
			if x.SessionID == before && x.BusinessLine != "" {
				t.Errorf("the session from before the lines has line %q", x.BusinessLine)
			}
		}

		// Bad input is a 400 that names the field; a cursor of one line's
		// listing is not valid for another's.
		p, err := c.Sessions(ctxOf(t), client.SessionQuery{ResourceName: res, BusinessLine: "search", Limit: 1})
		if err != nil || p.NextCursor == "" {
			t.Fatalf("first page of search: %v %+v", err, p)
		}
		base := "/admin/sessions?resourceName=" + res
		for _, path := range []string{
			base + "&businessLine=" + url.QueryEscape("<b>"),
			base + "&businessLine=Search",
			base + "&businessLine=ads&cursor=" + url.QueryEscape(p.NextCursor),
			base + "&businessLine=a&businessLine=b",
		} {
			code, out, _ := call(t, s, http.MethodGet, path, nil)
			wantCode(t, path, code, out, 400, "INVALID_ARGUMENT")
		}
	})
}
