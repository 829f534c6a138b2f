package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// The operators' endpoints (issue 10 §1), end to end on both backends,
// through the Go client for what works and raw requests for what must be
// refused (with a check that the refusal changed nothing).

func opsClient(t *testing.T, s *testenv.Server) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, client.WithAdminToken(s.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode checks an error answer's status and code.
func wantCode(t *testing.T, what string, code int, out map[string]any, wantStatus int, wantCode string) {
	t.Helper()
	if code != wantStatus || out["code"] != wantCode || out["message"] == "" {
		t.Errorf("%s: %d %v; want %d %s with a message", what, code, out, wantStatus, wantCode)
	}
}

// applyN opens n sessions of res, clients alternating a and b, each
// granted 100; it returns their ids in apply order.
func applyN(t *testing.T, c *client.Client, res string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		r, err := c.Apply(ctxOf(t), client.ApplyRequest{ResourceName: res, ApplyAmount: 100, ClientID: []string{"a", "b"}[i%2]})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.SessionID)
	}
	return ids
}

// allSessions follows q's cursors to the last page (at most 20 pages, each
// at most q.Limit long) and returns every session listed.
func allSessions(t *testing.T, c *client.Client, q client.SessionQuery) []client.SessionInfo {
	t.Helper()
	var all []client.SessionInfo
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("no last page after 20")
		}
		p, err := c.Sessions(ctxOf(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if q.Limit > 0 && len(p.Sessions) > q.Limit {
			t.Fatalf("page of %d, limit %d", len(p.Sessions), q.Limit)
		}
		all = append(all, p.Sessions...)
		if p.NextCursor == "" {
			return all
		}
		q.Cursor = p.NextCursor
	}
}

// lastAudit is the newest audit entry of res.
func lastAudit(t *testing.T, s *testenv.Server, res string) map[string]any {
	t.Helper()
	code, raw, _ := call(t, s, http.MethodGet, "/admin/audit?resourceName="+res+"&limit=1", nil)
	entries, _ := raw["entries"].([]any)
	if code != 200 || len(entries) != 1 {
		t.Fatalf("audit: %d %v", code, raw)
	}
	return entries[0].(map[string]any)
}

func TestSessionMapListsLiveThenSettledSessions(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 100000})
		ids := applyN(t, c, res, 7)
		finished := ids[:3]
		for _, id := range finished {
			if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: id, ActualUsedAmount: 40}); err != nil {
				t.Fatal(err)
			}
		}
		list := func(q client.SessionQuery) []client.SessionInfo { return allSessions(t, c, q) }
		all := list(client.SessionQuery{ResourceName: res, Limit: 2})
		var got []string
		for i, x := range all {
			got = append(got, x.SessionID)
			live := x.Status == "USING"
			if live != (i < 4) {
				t.Errorf("session %d is %s: want the 4 USING first, then the FINISHED", i, x.Status)
			}
			if live && (x.LeaseExpiresAt == nil || x.LastHeartbeat == nil || x.EndTime != nil || x.GrantedAmount != 100) {
				t.Errorf("live session %+v", x)
			}
			if !live && (x.EndTime == nil || x.ChargedAmount != 40 || x.RefundedAmount != 60 || x.LeaseExpiresAt != nil) {
				t.Errorf("finished session %+v", x)
			}
			if i > 4 && x.StartTime.After(all[i-1].StartTime) {
				t.Errorf("finished sessions not newest first: %v after %v", x.StartTime, all[i-1].StartTime)
			}
		}
		want := slices.Clone(ids)
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("listed %v, want each of %v once", got, want)
		}
		for _, tc := range []struct {
			q    client.SessionQuery
			want int
		}{
			{client.SessionQuery{ResourceName: res, ClientID: "a", Limit: 1}, 4},
			{client.SessionQuery{ResourceName: res, Status: "USING"}, 4},
			{client.SessionQuery{ResourceName: res, Status: "FINISHED", Limit: 2}, 3},
			{client.SessionQuery{ResourceName: res, Status: "LEAKED"}, 0},
			{client.SessionQuery{ResourceName: res, ClientID: "b", Status: "FINISHED"}, 1},
		} {
			got := list(tc.q)
			if len(got) != tc.want {
				t.Errorf("%+v: %d sessions, want %d", tc.q, len(got), tc.want)
			}
			for _, x := range got {
				if (tc.q.ClientID != "" && x.ClientID != tc.q.ClientID) || (tc.q.Status != "" && x.Status != tc.q.Status) {
					t.Errorf("%+v: got %+v", tc.q, x)
				}
			}
		}

		p, err := c.Sessions(ctxOf(t), client.SessionQuery{ResourceName: res, Limit: 1})
		if err != nil || p.NextCursor == "" {
			t.Fatalf("first page: %v, %+v", err, p)
		}
		cur := url.QueryEscape(p.NextCursor)
		other := strings.Replace(p.NextCursor, p.NextCursor[:4], "eyJ3", 1)
		base := "/admin/sessions?resourceName=" + res
		for _, tc := range []struct {
			path   string
			status int
			code   string
		}{
			{base + "&clientId=a&cursor=" + cur, 400, "INVALID_ARGUMENT"}, // another query's cursor
			{base + "&cursor=" + url.QueryEscape(other), 400, "INVALID_ARGUMENT"},
			{base + "&cursor=" + cur + "x", 400, "INVALID_ARGUMENT"},
			{base + "&cursor=not-a-cursor", 400, "INVALID_ARGUMENT"},
			{base + "&limit=0", 400, "INVALID_ARGUMENT"},
			{base + "&limit=1001", 400, "INVALID_ARGUMENT"},
			{base + "&limit=ten", 400, "INVALID_ARGUMENT"},
			{base + "&status=DONE", 400, "INVALID_ARGUMENT"},
			{base + "&clientId=" + url.QueryEscape("<b>"), 400, "INVALID_ARGUMENT"},
			{base + "&sort=asc", 400, "INVALID_ARGUMENT"},
			{base + "&limit=1&limit=2", 400, "INVALID_ARGUMENT"},
			{"/admin/sessions", 400, "INVALID_ARGUMENT"},
			{"/admin/sessions?resourceName=no-such-" + testenv.RandomSuffix(), 404, "RESOURCE_NOT_FOUND"},
		} {
			code, out, _ := call(t, s, http.MethodGet, tc.path, nil)
			wantCode(t, tc.path, code, out, tc.status, tc.code)
		}
	})
}

func TestUsageSumsTheLedger(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 100000})
		ids := applyN(t, c, res, 5) // a: 3, b: 2
		if _, err := c.Finish(ctxOf(t), client.FinishRequest{ResourceName: res, SessionID: ids[0], ActualUsedAmount: 130}); err != nil {
			t.Fatal(err)
		}
		rep, err := c.Usage(ctxOf(t), client.UsageQuery{ResourceName: res, GroupBy: "client"})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Unit != "tokens" || rep.GroupBy != "client" || len(rep.Groups) != 2 || rep.Truncated {
			t.Fatalf("report %+v", rep)
		}
		a, b := rep.Groups[0], rep.Groups[1]
		if a.ClientID != "a" || a.Sessions != 3 || a.OpenSessions != 2 || a.GrantedAmount != 300 || a.ChargedAmount != 130 ||
			a.OverageAmount != 30 || a.ReservedAmount != 200 {
			t.Errorf("client a: %+v", a)
		}
		if b.ClientID != "b" || b.Sessions != 2 || b.ChargedAmount != 0 || b.ReservedAmount != 200 {
			t.Errorf("client b: %+v", b)
		}
		hours, err := c.Usage(ctxOf(t), client.UsageQuery{ResourceName: res, GroupBy: "hour",
			From: time.Now().Add(-2 * time.Hour), To: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, g := range hours.Groups {
			if g.Start == nil || g.ClientID != "" || !g.Start.Equal(g.Start.Truncate(time.Hour)) {
				t.Errorf("hour group %+v", g)
			}
			n += g.Sessions
		}
		if n != 5 {
			t.Errorf("hours hold %d sessions, want 5", n)
		}
		now := time.Now().UTC()
		base := "/admin/usage?resourceName=" + res
		for _, tc := range []struct {
			path   string
			status int
			code   string
		}{
			{base + "&groupBy=lines", 400, "INVALID_ARGUMENT"},
			{base + "&groupBy=week", 400, "INVALID_ARGUMENT"},
			{base + "&from=" + now.Format(time.RFC3339) + "&to=" + now.Add(-time.Hour).Format(time.RFC3339), 400, "INVALID_ARGUMENT"},
			{base + "&from=" + now.Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339), 400, "INVALID_ARGUMENT"},
			{base + "&groupBy=hour&from=" + now.Add(-40*24*time.Hour).Format(time.RFC3339), 400, "INVALID_ARGUMENT"},
			{base + "&from=yesterday", 400, "INVALID_ARGUMENT"},
			{base + "&from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59Z", 400, "INVALID_ARGUMENT"},             // was read as "from not given"
			{base + "&groupBy=day&from=1969-12-31T00:00:00Z&to=1970-01-02T00:00:00Z", 400, "INVALID_ARGUMENT"}, // before the ledger's epoch milliseconds
			{base + "&resource=x", 400, "INVALID_ARGUMENT"},
			{"/admin/usage?resourceName=NOPE", 400, "INVALID_ARGUMENT"},
			{"/admin/usage?resourceName=no-such-" + testenv.RandomSuffix(), 404, "RESOURCE_NOT_FOUND"},
		} {
			code, out, _ := call(t, s, http.MethodGet, tc.path, nil)
			wantCode(t, tc.path, code, out, tc.status, tc.code)
		}
	})
}

func TestForceFinishSettlesOnTheClientsBehalf(t *testing.T) {
	forModes(t, func(t *testing.T, s *testenv.Server) {
		c := opsClient(t, s)
		res := testenv.Resource(t)
		putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 1000})
		ids := applyN(t, c, res, 3)
		for _, tc := range []struct {
			name, id, body string
			status         int
			code           string
		}{
			{"negative", ids[0], `{"amount":-1}`, 400, "INVALID_ARGUMENT"},
			{"string", ids[0], `{"amount":"5"}`, 400, "INVALID_ARGUMENT"},
			{"fraction", ids[0], `{"amount":1.5}`, 400, "INVALID_ARGUMENT"},
			{"unknown field", ids[0], `{"actual":5}`, 400, "INVALID_ARGUMENT"},
			{"reason too long", ids[0], `{"reason":"` + strings.Repeat("é", 501) + `"}`, 400, "INVALID_ARGUMENT"},
			{"bad id", "a%20b", `{}`, 400, "INVALID_ARGUMENT"},
			{"other resource", ids[0], `{"resourceName":"no-such-` + testenv.RandomSuffix() + `"}`, 404, "SESSION_NOT_FOUND"},
			{"unknown session", "no-such-session", `{}`, 404, "SESSION_NOT_FOUND"},
		} {
			code, out, _ := call(t, s, http.MethodPost, "/admin/sessions/"+tc.id+"/finish", tc.body)
			wantCode(t, tc.name, code, out, tc.status, tc.code)
		}
		if st, _ := getStatus(t, s, res); st.reserved != 300 || st.active != 3 {
			t.Fatalf("refused finishes changed the balance: %+v", st)
		}
		r, err := c.ForceFinish(ctxOf(t), ids[0], client.ForceFinishRequest{Reason: "client crashed"})
		if err != nil {
			t.Fatal(err)
		}
		if r.ChargedAmount != 100 || r.RefundedAmount != 0 || r.ClientID != "a" || r.ResourceName != res {
			t.Fatalf("default amount is the grant: %+v", r)
		}
		amt := int64(30)
		if r, err = c.ForceFinish(ctxOf(t), ids[1], client.ForceFinishRequest{ResourceName: res, Amount: &amt}); err != nil ||
			r.ChargedAmount != 30 || r.RefundedAmount != 70 {
			t.Fatalf("amount 30: %+v, %v", r, err)
		}
		// Without a body: all defaults.
		if code, out, _ := call(t, s, http.MethodPost, "/admin/sessions/"+ids[2]+"/finish", nil); code != 200 || num(t, out, "chargedAmount") != 100 {
			t.Fatalf("no body: %d %v", code, out)
		}
		if _, err := c.ForceFinish(ctxOf(t), ids[0], client.ForceFinishRequest{}); !errors.Is(err, client.ErrSessionNotActive) {
			t.Fatalf("second forced finish: %v, want ErrSessionNotActive", err)
		}
		if st, _ := getStatus(t, s, res); st.used != 230 || st.reserved != 0 {
			t.Fatalf("after forced finishes: %+v", st)
		}
		_, raw, _ := call(t, s, http.MethodGet, "/admin/audit?resourceName="+res, nil)
		var finishes int
		for _, e := range raw["entries"].([]any) {
			if e.(map[string]any)["action"] == "session.finish" {
				finishes++
			}
		}
		if finishes != 3 {
			t.Fatalf("%d session.finish entries, want 3: %v", finishes, raw)
		}
	})
}

func TestAdminTokenReadsAnyStatus(t *testing.T) {
	const key = "ops-test-key-0123456789"
	const token = "ops-test-admin-0123456789"
	s := testenv.Start(t, testenv.Dev, "--api-keys", key+"=svc:*", "--admin-tokens", "ops:"+token)
	s.AdminToken = token
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10})
	get := func(h map[string]string, method, path string) int {
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(`{}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	path := "/quota/status?resourceName=" + res
	for _, tc := range []struct {
		name   string
		h      map[string]string
		method string
		path   string
		want   int
	}{
		{"admin token", map[string]string{"Authorization": "Bearer " + token}, "GET", path, 200},
		{"API key", map[string]string{"X-API-Key": key}, "GET", path, 200},
		{"nothing", nil, "GET", path, 401},
		{"wrong admin token", map[string]string{"Authorization": "Bearer nope-nope-nope-nope"}, "GET", path, 401},
		{"admin token may not apply", map[string]string{"Authorization": "Bearer " + token}, "POST", "/quota/apply", 401},
	} {
		if got := get(tc.h, tc.method, tc.path); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAuditTakesResourceNameAndItsOldName(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10})
	for _, q := range []string{"resourceName=" + res, "resource=" + res} {
		code, out, _ := call(t, s, http.MethodGet, "/admin/audit?"+q, nil)
		if code != 200 || len(out["entries"].([]any)) != 1 {
			t.Errorf("%s: %d %v", q, code, out)
		}
	}
	code, out, _ := call(t, s, http.MethodGet, fmt.Sprintf("/admin/audit?resourceName=%s&resource=%s", res, res), nil)
	wantCode(t, "both names", code, out, 400, "INVALID_ARGUMENT")
}

func TestExhaustionETAMetric(t *testing.T) {
	s := testenv.Start(t, testenv.Dev)
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "COUNT", "totalLimit": 10})
	_, st := getStatus(t, s, res)
	if v, ok := st["burnRate"]; !ok || v != nil {
		t.Errorf("burnRate %v (present: %v): want null with no history", v, ok)
	}
	if v, ok := st["exhaustsAt"]; !ok || v != nil {
		t.Errorf("exhaustsAt %v (present: %v): want null", v, ok)
	}
	// The forecast gauges cover the used resources (issue 23 §1): one
	// apply, and the burn rate is still unknown (under 10 s of samples).
	if code, out, _ := call(t, s, http.MethodPost, "/quota/apply", map[string]any{"resourceName": res, "clientId": "c", "applyAmount": 1}); code != 200 {
		t.Fatalf("apply: %d %v", code, out)
	}
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := `quota_exhaustion_eta_seconds{resource="` + res + `"} +Inf`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
