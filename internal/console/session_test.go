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

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, referer string
		want            bool
	}{
		{"", "", true},
		{"http://qc.example:8080", "", true},
		{"", "http://qc.example:8080/admin/ui/resources", true},
		{"http://evil.example", "", false},
		{"null", "", false},
		{"", "http://evil.example/x", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://qc.example:8080/admin/ui/login", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.referer != "" {
			r.Header.Set("Referer", tc.referer)
		}
		if got := sameOrigin(r); got != tc.want {
			t.Errorf("origin %q referer %q: %v, want %v", tc.origin, tc.referer, got, tc.want)
		}
	}
}
