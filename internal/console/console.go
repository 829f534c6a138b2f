package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Prefix is where the console is served.
const Prefix = "/admin/ui"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Ops is what the console reads and does (*admin.Service).
type Ops interface {
	Policies(ctx context.Context) ([]quota.Policy, error)
	Status(ctx context.Context, resource string) (quota.StatusResponse, admin.Forecast, error)
	Sessions(ctx context.Context, q admin.SessionQuery) (admin.SessionPage, error)
	Usage(ctx context.Context, q admin.UsageQuery) (admin.Usage, error)
	PatchPolicy(ctx context.Context, resource string, patch []byte, force bool, reason string) (quota.Policy, error)
	CreatePolicy(ctx context.Context, p quota.Policy, reason string) (quota.Policy, error)
	Reset(ctx context.Context, resource, reason string) (old, cur quota.Period, err error)
	ForceFinish(ctx context.Context, req admin.FinishRequest) (quota.FinishResponse, quota.UsageRecord, error)
}

// Pools are the pools' reads and actions (admin.*Pools): the pools page
// (layout, lines, grants, reclaims, events), temporary grants, reserve
// releases, voiding a grant, confirming or cancelling a reclaim, and the
// pool settings.
type Pools interface {
	AddGrant(ctx context.Context, resource string, req admin.GrantRequest) (pools.GrantRecord, error)
	Release(ctx context.Context, resource string, req admin.GrantRequest) (pools.GrantRecord, error)
	VoidGrant(ctx context.Context, resource, id string) (admin.Voided, error)
	Status(ctx context.Context, resource string) (admin.PoolStatus, bool, error)
	Reclaims(ctx context.Context, resource string) ([]pools.Reclaim, error)
	SetReclaim(ctx context.Context, resource, id string, confirm bool) (pools.Reclaim, error)
	Events(ctx context.Context, resource string, limit int) ([]pools.PoolEvent, error)
	PutSettings(ctx context.Context, resource string, s pools.Settings) (pools.Layout, error)
}

// AuditReader reads the audit log (*quota.Service).
type AuditReader interface {
	Audit(ctx context.Context, f quota.AuditFilter) ([]quota.AuditRecord, error)
}

// SessionStore keeps sign-in sessions (*redisstore.ConsoleSessions).
type SessionStore interface {
	Put(ctx context.Context, id string, value []byte, ttl time.Duration) error
	Get(ctx context.Context, id string) ([]byte, bool, error)
	Delete(ctx context.Context, id string) error
}

// Deps wires a Console.
type Deps struct {
	Ops      Ops
	Pools    Pools // nil: no grant or release actions
	Audit    AuditReader
	Sessions SessionStore
	// SignIn checks an admin token and returns the name changes are
	// audited under (httpapi.Server.AdminSignIn).
	SignIn func(token string) (string, bool)
	// OpenAdmin: admin auth is off (dev mode without QC_ADMIN_TOKENS); the
	// sign-in page says any token will do.
	OpenAdmin bool
	Logger    *zap.Logger
	Now       func() time.Time // default time.Now
	// SessionTTL is how long a sign-in lasts (default 8h).
	SessionTTL time.Duration
}

// Console serves /admin/ui.
type Console struct {
	d    Deps
	tmpl map[string]*template.Template
	mux  *chi.Mux
}

// New builds the console.
func New(d Deps) *Console {
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.SessionTTL <= 0 {
		d.SessionTTL = 8 * time.Hour
	}
	c := &Console{d: d, tmpl: parseTemplates()}
	c.mux = c.routes()
	return c
}

// Handler returns the console's handler, rooted at Prefix.
func (c *Console) Handler() http.Handler { return c.mux }

// Mount sends requests under Prefix to the console and all others to api.
func Mount(api http.Handler, c *Console) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/") {
			c.mux.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (c *Console) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(securityHeaders, limitForms)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { notFound(w, r) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		jsonError(w, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	})
	static, _ := fs.Sub(staticFS, "static")
	r.Handle(Prefix+"/static/*", http.StripPrefix(Prefix+"/static/", staticHandler(static)))
	r.Get(Prefix+"/login", c.loginPage)
	r.Post(Prefix+"/login", c.login)
	r.Group(func(r chi.Router) {
		r.Use(c.requireSession)
		r.Get(Prefix, redirectTo(Prefix+"/resources"))
		r.Get(Prefix+"/", redirectTo(Prefix+"/resources"))
		r.Get(Prefix+"/resources", c.resourcesPage)
		r.Get(Prefix+"/resources/{resourceName}", c.resourcePage)
		r.Get(Prefix+"/resources/{resourceName}/usage", c.usagePage)
		r.Get(Prefix+"/resources/{resourceName}/pools", c.poolsPage)
		r.Get(Prefix+"/audit", c.auditPage)
		r.Group(func(r chi.Router) {
			r.Use(c.requireCSRF)
			r.Post(Prefix+"/logout", c.logout)
			r.Post(Prefix+"/policies", c.createPolicy)
			r.Post(Prefix+"/resources/{resourceName}/limit", c.changeLimit)
			r.Post(Prefix+"/resources/{resourceName}/policy", c.editPolicy)
			r.Post(Prefix+"/resources/{resourceName}/reset", c.resetPeriod)
			r.Post(Prefix+"/sessions/{sessionId}/finish", c.forceFinish)
			r.Post(Prefix+"/resources/{resourceName}/grant", c.grant(false))
			r.Post(Prefix+"/resources/{resourceName}/release", c.grant(true))
			r.Post(Prefix+"/resources/{resourceName}/grants/{id}/void", c.voidGrant)
			r.Post(Prefix+"/resources/{resourceName}/pools", c.poolSettings)
			r.Post(Prefix+"/resources/{resourceName}/reclaims/{id}/{step}", c.reclaimStep)
		})
	})
	return r
}

func redirectTo(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, path, http.StatusSeeOther) }
}

// securityHeaders: everything comes from this origin (no inline script or
// style), no framing, no sniffing, no caching of pages with balances.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// limitForms caps request bodies (forms are small).
func limitForms(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		next.ServeHTTP(w, r)
	})
}

func staticHandler(fsys fs.FS) http.Handler {
	files := http.FileServer(http.FS(fsys))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only files are served: a directory, a missing asset or a path
		// fs.FS refuses (.., //) is the same JSON 404 as any unknown path.
		if st, err := fs.Stat(fsys, r.URL.Path); err != nil || st.IsDir() {
			notFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// notFound answers an unknown console path, or a missing static asset, the
// way the API answers an unknown route: 404 with the JSON error body.
func notFound(w http.ResponseWriter, r *http.Request) {
	jsonError(w, http.StatusNotFound, httpapi.CodeNotFound, "no such page or file: "+r.URL.Path)
}

// jsonError is the API's JSON error answer (httpapi.WriteError), never
// cached (static paths included, whose files may be cached).
func jsonError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	httpapi.WriteError(w, status, code, msg)
}
