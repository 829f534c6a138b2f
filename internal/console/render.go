package console

import (
	"bytes"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/display"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/quota"
)

// page is what every template gets: the layout's fields and the page's own
// Data.
type page struct {
	Title   string
	Actor   string
	CSRF    string
	Nav     string // the active tab
	Flash   string // the outcome of the last action
	Error   string
	Partial bool // htmx refresh: the fragment only
	Data    any
}

var funcs = template.FuncMap{
	"amount":  func(t quota.QuotaType, v int64) string { return display.Amount(t.Unit(), v) },
	"rate":    func(t quota.QuotaType, r *float64) string { return display.Rate(t.Unit(), r) },
	"clock":   func(d time.Duration) string { return display.Clock(int64(d / time.Second)) },
	"grouped": display.Grouped,
	"list":    func(v ...string) []string { return v },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"until": func(now time.Time, t *time.Time) string { return display.Until(now, t) },
	"pct": func(part, whole int64) int64 {
		if whole <= 0 || part <= 0 {
			return 0
		}
		return min(100, part*100/whole)
	},
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"pretty": func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return "—"
		}
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"sortLink": func(base, cur, dir, col string) string {
		next := "asc"
		if cur == col && dir == "asc" {
			next = "desc"
		}
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		return base + sep + "sort=" + col + "&dir=" + next
	},
	"arrow": func(cur, dir, col string) string {
		if cur != col {
			return ""
		}
		if dir == "asc" {
			return " ▲"
		}
		return " ▼"
	},
}

// parseTemplates builds one template set per page: the layout plus the
// page.
func parseTemplates() map[string]*template.Template {
	out := map[string]*template.Template{}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n))
	}
	return out
}

// render writes a page (or, for an htmx refresh, its "live" block only: the
// part that changes by itself, never a form being filled in).
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	sd := sessionFrom(r.Context())
	p.Actor, p.CSRF = sd.Actor, sd.CSRF
	if p.Flash == "" {
		p.Flash = r.URL.Query().Get("done")
	}
	// htmx names the element it refreshes: #live gets the "live" block
	// alone; any other target gets the whole page and picks its part
	// (hx-select).
	p.Partial = r.Header.Get("HX-Request") != "" && r.Header.Get("HX-Target") == "live"
	t, ok := c.tmpl[name]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	tmpl := "layout.html"
	if p.Partial && t.Lookup("live") != nil {
		tmpl = "live"
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, tmpl, p); err != nil {
		c.d.Logger.Error("console template", zap.String("page", name), zap.Error(err))
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail answers with an error page (escaped like everything else), or,
// to a client that asks for JSON and not for HTML (a script posting the
// forms with Accept: application/json), with the API's JSON error body
// {success:false, code, message}: the same status and message, the code
// of the status (failCodes).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if wantsJSON(r) {
		code, ok := failCodes[status]
		if !ok {
			code = string(quota.CodeInternal)
		}
		jsonError(w, status, code, msg)
		return
	}
	c.render(w, r, status, "error", page{Title: http.StatusText(status), Error: msg})
}

// failCodes are the wire codes of the statuses fail answers with.
var failCodes = map[int]string{
	http.StatusBadRequest:         string(quota.CodeInvalidArgument),
	http.StatusUnauthorized:       httpapi.CodeUnauthenticated,
	http.StatusForbidden:          string(quota.CodePermissionDenied),
	http.StatusNotFound:           string(quota.CodeNotFound),
	http.StatusConflict:           string(quota.CodeConflict),
	http.StatusServiceUnavailable: string(quota.CodeBackendUnavailable),
}

// wantsJSON: the request's Accept names application/json and not
// text/html (browsers' navigations and htmx name text/html).
func wantsJSON(r *http.Request) bool {
	accept := strings.ToLower(strings.Join(r.Header.Values("Accept"), ","))
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}
