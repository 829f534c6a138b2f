package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/quota"
)

// cookieName is the console's session cookie: HttpOnly, SameSite=Strict,
// Path=/admin/ui, Secure over HTTPS. Its value is a random id; the session
// (who signed in, the CSRF token) is in Redis.
const cookieName = "qc_console"

// csrfField is the form field every change must carry.
const csrfField = "csrf"

type sessionData struct {
	Actor string `json:"actor"`
	CSRF  string `json:"csrf"`
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) sessionData {
	s, _ := ctx.Value(sessionKey{}).(sessionData)
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// crossOrigin is net/http's CrossOriginProtection (Go 1.25+), which
// replaced a hand-made Origin/Referer comparison: a POST is refused when
// the browser says it is cross-site (Sec-Fetch-Site other than same-origin
// or none) or, from a browser without Sec-Fetch-Site, when its Origin's
// host is not the request's Host ("null" included). A POST with neither
// header passes: it does not come from a browser (curl, a script), so it
// carries no victim's ambient cookie; the session's CSRF token is still
// required for every change. The SameSite cookie keeps other sites' forms
// out as well; this also covers the sign-in form, which has no session
// yet. No origin is trusted beyond the console's own.
var crossOrigin = http.NewCrossOriginProtection()

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: map[string]any{"Open": c.d.OpenAdmin}})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if crossOrigin.Check(r) != nil {
		c.fail(w, r, http.StatusForbidden, "refused: the sign-in did not come from this console")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "the form could not be read")
		return
	}
	if f := repeated(r.PostForm); f != "" {
		c.fail(w, r, http.StatusBadRequest, "refused: the form gives “"+f+"” more than once")
		return
	}
	actor, ok := c.d.SignIn(r.PostForm.Get("token"))
	if !ok {
		c.d.Logger.Info("console sign-in refused", zap.String("remote", r.RemoteAddr))
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Error: "That admin token is not valid.",
			Data: map[string]any{"Open": c.d.OpenAdmin}})
		return
	}
	id := randomHex(32)
	sd := sessionData{Actor: actor, CSRF: randomHex(32)}
	b, _ := json.Marshal(sd)
	if err := c.d.Sessions.Put(r.Context(), id, b, c.d.SessionTTL); err != nil {
		c.d.Logger.Warn("console session store", zap.Error(err))
		c.fail(w, r, http.StatusServiceUnavailable, "the session could not be stored (Redis did not answer); try again")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r), MaxAge: int(c.d.SessionTTL.Seconds())})
	c.d.Logger.Info("console sign-in", zap.String("actor", actor))
	http.Redirect(w, r, Prefix+"/resources", http.StatusSeeOther)
}

func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		_ = c.d.Sessions.Delete(r.Context(), ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r), MaxAge: -1})
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// requireSession lets signed-in requests through with the actor in the
// context; others go to the sign-in page (a page) or get 401 (anything
// else: a change, a partial refresh).
func (c *Console) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sd sessionData
		ok := false
		if ck, err := r.Cookie(cookieName); err == nil && len(ck.Value) == 64 {
			b, found, err := c.d.Sessions.Get(r.Context(), ck.Value)
			if err != nil {
				c.fail(w, r, http.StatusServiceUnavailable, "the session could not be read (Redis did not answer); try again")
				return
			}
			ok = found && json.Unmarshal(b, &sd) == nil && sd.CSRF != ""
		}
		if !ok {
			if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
				http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, http.StatusUnauthorized, "not signed in (or the session expired): sign in again")
			return
		}
		ctx := context.WithValue(quota.WithActor(r.Context(), sd.Actor), sessionKey{}, sd)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// requireCSRF refuses a change whose form lacks the session's CSRF token
// (or comes from another origin) with 403, and one that gives a field more
// than once (limit=10&limit=20: the JSON API refuses a name given twice
// too) with 400; nothing is changed.
func (c *Console) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "the form could not be read")
			return
		}
		want := sessionFrom(r.Context()).CSRF
		got := r.PostForm.Get(csrfField)
		if crossOrigin.Check(r) != nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			c.d.Logger.Info("console change refused: CSRF", zap.String("path", r.URL.Path))
			c.fail(w, r, http.StatusForbidden, "refused: the form's CSRF token is missing or wrong (reload the page and try again)")
			return
		}
		if f := repeated(r.PostForm); f != "" {
			c.fail(w, r, http.StatusBadRequest, "nothing was changed: the form gives “"+f+"” more than once")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// repeated is the name of a field form gives more than once ("" if none),
// the first in name order.
func repeated(form url.Values) string {
	names := make([]string, 0, len(form))
	for name, vs := range form {
		if len(vs) > 1 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[0]
}
