package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Creates of one new name racing each other on real MariaDB: exactly one
// is stored (303), every other is refused with 409 and the JSON error body
// (the clients ask for JSON), the stored policy is the winner's, and the
// audit log holds that one create. The check and the store were two steps
// once, and several creates passed the check and were all stored.
func TestConcurrentCreatesOfOneNameStoreOne(t *testing.T) {
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "ops-hal:"+adminToken)
	c, err := client.New(s.URL, client.WithAdminToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	ui := s.URL + "/admin/ui"
	const racers = 12
	for round := range 3 {
		res := fmt.Sprintf("%s-%d", testenv.Resource(t), round)
		type answer struct {
			limit int
			code  int
			body  string
			err   error
		}
		posts := make([]func() answer, racers)
		for i := range posts {
			post, csrf := jsonPoster(t, ui)
			limit := 1000 + i
			posts[i] = func() answer {
				code, body, err := post("/policies", url.Values{"name": {res}, "type": {"TOKENS"}, "limit": {fmt.Sprint(limit)},
					"leak": {"300"}, "failmode": {"CLOSED"}, "reason": {"race"}, "confirm": {"yes"}, "csrf": {csrf}})
				return answer{limit, code, body, err}
			}
		}
		answers := make([]answer, racers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i, post := range posts {
			done.Go(func() {
				start.Wait()
				answers[i] = post()
			})
		}
		start.Done()
		done.Wait()
		winner := -1
		for _, a := range answers {
			switch {
			case a.err != nil:
				t.Fatalf("round %d: %v", round, a.err)
			case a.code == http.StatusSeeOther:
				if winner >= 0 {
					t.Errorf("round %d: the creates of limits %d and %d were both stored", round, winner, a.limit)
				}
				winner = a.limit
			case a.code == http.StatusConflict:
				var e struct {
					Success bool   `json:"success"`
					Code    string `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Success || e.Code != "CONFLICT" || !strings.Contains(e.Message, "already exists") {
					t.Errorf("round %d: a refused create answered %q (%v)", round, a.body, err)
				}
			default:
				t.Errorf("round %d: a create answered %d %q", round, a.code, a.body)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no create was stored", round)
		}
		if p, err := c.GetPolicy(context.Background(), res); err != nil || p.TotalLimit != int64(winner) {
			t.Errorf("round %d: stored %+v, %v; the create answered 303 had limit %d", round, p, err, winner)
		}
		if a, err := c.Audit(context.Background(), client.AuditQuery{Resource: res}); err != nil || len(a) != 1 {
			t.Errorf("round %d: audit of %s: %d entries (%v), want the one create", round, res, len(a), err)
		}
	}
}

// jsonPoster signs in to the console at ui over plain HTTP, asking for
// JSON answers, and returns a poster of forms (redirects not followed;
// safe for concurrent use, it never fails the test itself) and the
// session's CSRF token.
func jsonPoster(t *testing.T, ui string) (post func(path string, form url.Values) (int, string, error), csrf string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post = func(path string, form url.Values) (int, string, error) {
		req, err := http.NewRequest(http.MethodPost, ui+path, strings.NewReader(form.Encode()))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	if code, body, err := post("/login", url.Values{"token": {adminToken}}); err != nil || code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %q, %v", code, body, err)
	}
	_, csrf = pageWithCSRF(t, hc, ui+"/resources")
	return post, csrf
}
