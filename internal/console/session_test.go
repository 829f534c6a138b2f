package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// downStore is a session store whose Redis does not answer.
type downStore struct{}

var errDown = errors.New("redis down")

func (downStore) Put(context.Context, string, []byte, time.Duration) error { return errDown }
func (downStore) Get(context.Context, string) ([]byte, bool, error)        { return nil, false, errDown }
func (downStore) Delete(context.Context, string) error                     { return errDown }

// When the session store fails, sign-in and signed-in pages answer 503 with
// a page that says so, and nobody is let in.
func TestSessionStoreDownIsA503(t *testing.T) {
	c := New(Deps{Sessions: downStore{}, SignIn: func(string) (string, bool) { return "alice", true }})
	post := httptest.NewRequest(http.MethodPost, Prefix+"/login", strings.NewReader(url.Values{"token": {"t"}}.Encode()))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	c.Handler().ServeHTTP(w, post)
	if w.Code != http.StatusServiceUnavailable || len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), "Redis") {
		t.Fatalf("sign-in with the store down: %d %v %q", w.Code, w.Result().Cookies(), w.Body.String())
	}
	get := httptest.NewRequest(http.MethodGet, Prefix+"/resources", nil)
	get.AddCookie(&http.Cookie{Name: cookieName, Value: strings.Repeat("a", 64)})
	w = httptest.NewRecorder()
	c.Handler().ServeHTTP(w, get)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a page with the store down: %d", w.Code)
	}
}

// The console's cross-origin check is net/http's CrossOriginProtection:
// a cross-site browser POST is refused by Sec-Fetch-Site or, without it,
// by an Origin that is not the Host; a request with neither header (not a
// browser) passes to the CSRF token check. A Referer alone decides
// nothing any more: every browser that sends a cross-site POST sends
// Origin or Sec-Fetch-Site with it.
func TestCrossOriginCheck(t *testing.T) {
	for _, tc := range []struct {
		origin, fetchSite string
		want              bool // allowed
	}{
		{"", "", true},
		{"http://qc.example:8080", "", true},
		{"http://evil.example", "", false},
		{"null", "", false},
		{"http://qc.example:9090", "", false}, // another port is another origin
		{"", "same-origin", true},
		{"", "none", true}, // typed into the address bar, a bookmark
		{"", "cross-site", false},
		{"", "same-site", false}, // a sibling subdomain is not this origin
		{"http://qc.example:8080", "cross-site", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://qc.example:8080/admin/ui/login", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.fetchSite != "" {
			r.Header.Set("Sec-Fetch-Site", tc.fetchSite)
		}
		if got := crossOrigin.Check(r) == nil; got != tc.want {
			t.Errorf("Origin %q Sec-Fetch-Site %q: allowed %v, want %v", tc.origin, tc.fetchSite, got, tc.want)
		}
	}
}

// A cross-site sign-in or change is refused with 403 by the handlers, and
// nothing is signed in (no cookie).
func TestCrossSitePostsAreRefused(t *testing.T) {
	c := New(Deps{Sessions: downStore{}, SignIn: func(string) (string, bool) { return "alice", true }})
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}} {
		post := httptest.NewRequest(http.MethodPost, Prefix+"/login", strings.NewReader(url.Values{"token": {"t"}}.Encode()))
		post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			post.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		c.Handler().ServeHTTP(w, post)
		if w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
			t.Errorf("sign-in with %v: %d, cookies %v; want 403 and none", h, w.Code, w.Result().Cookies())
		}
	}
}
