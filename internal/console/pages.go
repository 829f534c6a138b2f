package console

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/quota"
)

// resourceRow is one line of the resources page.
type resourceRow struct {
	Policy   quota.Policy
	Status   quota.StatusResponse
	Forecast admin.Forecast
	Err      string
}

// sortDir reads sort and dir from the query, with defaults.
func sortDir(r *http.Request, def string, allowed ...string) (string, string) {
	s, d := r.URL.Query().Get("sort"), r.URL.Query().Get("dir")
	if !slices.Contains(allowed, s) {
		s = def
	}
	if d != "desc" {
		d = "asc"
	}
	return s, d
}

func ordered[T any](rows []T, dir string, key func(a, b T) int) {
	slices.SortStableFunc(rows, func(a, b T) int {
		if dir == "desc" {
			return key(b, a)
		}
		return key(a, b)
	})
}

func ptrCmp[T cmp.Ordered](a, b *T) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return cmp.Compare(*a, *b)
}

func (c *Console) resourcesPage(w http.ResponseWriter, r *http.Request) {
	pols, err := c.d.Ops.Policies(r.Context())
	if err != nil {
		c.fail(w, r, statusOf(err), "the policies could not be read: "+err.Error())
		return
	}
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	var rows []resourceRow
	for _, p := range pols {
		if q != "" && !strings.Contains(p.ResourceName, strings.ToLower(q)) {
			continue
		}
		row := resourceRow{Policy: p}
		st, f, err := c.d.Ops.Status(r.Context(), p.ResourceName)
		if err != nil {
			row.Err = "unavailable"
		}
		row.Status, row.Forecast = st, f
		if err == nil {
			row.Policy = st.Policy
		}
		rows = append(rows, row)
	}
	sort, dir := sortDir(r, "name", "name", "type", "limit", "remaining", "burn", "exhausts")
	ordered(rows, dir, func(a, b resourceRow) int {
		switch sort {
		case "type":
			return cmp.Compare(a.Policy.QuotaType, b.Policy.QuotaType)
		case "limit":
			return cmp.Compare(a.Policy.TotalLimit, b.Policy.TotalLimit)
		case "remaining":
			return cmp.Compare(a.Status.Remaining, b.Status.Remaining)
		case "burn":
			return ptrCmp(a.Forecast.BurnRate, b.Forecast.BurnRate)
		case "exhausts":
			return cmp.Compare(etaKey(a.Forecast), etaKey(b.Forecast))
		}
		return cmp.Compare(a.Policy.ResourceName, b.Policy.ResourceName)
	})
	base := Prefix + "/resources?q=" + url.QueryEscape(q)
	c.render(w, r, http.StatusOK, "resources", page{Title: "Resources", Nav: "resources", Data: map[string]any{
		"Rows": rows, "Q": q, "Sort": sort, "Dir": dir, "Base": base, "Now": c.d.Now(),
		"Refresh": r.URL.RequestURI(),
	}})
}

// etaKey orders forecasts: soonest exhaustion first, never last.
func etaKey(f admin.Forecast) int64 {
	if f.ExhaustsAt == nil {
		return 1 << 62
	}
	return f.ExhaustsAt.UnixMilli()
}

func (c *Console) resourcePage(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	st, f, err := c.d.Ops.Status(r.Context(), name)
	if err != nil {
		c.fail(w, r, statusOf(err), err.Error())
		return
	}
	qs := r.URL.Query()
	sq := admin.SessionQuery{Resource: name, ClientID: qs.Get("client"), Line: qs.Get("line"), Status: quota.Status(qs.Get("status")),
		Cursor: qs.Get("cursor"), Limit: 200}
	pg, err := c.d.Ops.Sessions(r.Context(), sq)
	var listErr string
	if err != nil {
		listErr = err.Error()
	}
	sort, dir := sortDir(r, "", "client", "line", "status", "granted", "started", "age", "lease")
	if sort != "" {
		ordered(pg.Sessions, dir, func(a, b admin.Session) int {
			switch sort {
			case "client":
				return cmp.Compare(a.ClientID, b.ClientID)
			case "line":
				return cmp.Compare(a.BusinessLine, b.BusinessLine)
			case "status":
				return cmp.Compare(a.Status, b.Status)
			case "granted":
				return cmp.Compare(a.Granted, b.Granted)
			case "started":
				return a.StartTime.Compare(b.StartTime)
			case "age":
				return cmp.Compare(a.Age, b.Age)
			}
			return a.LeaseExpiresAt.Compare(b.LeaseExpiresAt)
		})
	}
	filter := url.Values{}
	for _, k := range []string{"client", "line", "status"} {
		if v := qs.Get(k); v != "" {
			filter.Set(k, v)
		}
	}
	base := Prefix + "/resources/" + url.PathEscape(name) + "?" + filter.Encode()
	next := ""
	if pg.NextCursor != "" {
		filter.Set("cursor", pg.NextCursor)
		next = Prefix + "/resources/" + url.PathEscape(name) + "?" + filter.Encode()
	}
	c.render(w, r, http.StatusOK, "resource", page{Title: name, Nav: "resources", Data: map[string]any{
		"Status": st, "Forecast": f, "Sessions": pg.Sessions, "Pools": c.d.Pools != nil, "Next": next, "ListErr": listErr,
		"Client": qs.Get("client"), "Line": qs.Get("line"), "State": qs.Get("status"), "Sort": sort, "Dir": dir, "Base": base,
		"Now": c.d.Now(), "Refresh": r.URL.RequestURI(),
	}})
}

// chartData is the usage chart's series for uPlot: x in Unix seconds, and
// granted and charged per hour.
type chartData struct {
	From    int64   `json:"from"` // the range shown, Unix seconds
	To      int64   `json:"to"`
	X       []int64 `json:"x"`
	Granted []int64 `json:"granted"`
	Charged []int64 `json:"charged"`
	Unit    string  `json:"unit"`
}

func (c *Console) usagePage(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	qs := r.URL.Query()
	var from, to time.Time
	var perr error
	parse := func(v string) time.Time {
		if v == "" || perr != nil {
			return time.Time{}
		}
		t, err := time.Parse("2006-01-02T15:04", v)
		if err != nil {
			perr = fmt.Errorf("a time must look like 2025-06-01T13:00 (UTC), not %q", v)
		}
		return t.UTC()
	}
	from, to = parse(qs.Get("from")), parse(qs.Get("to"))
	if perr != nil {
		c.fail(w, r, http.StatusBadRequest, perr.Error())
		return
	}
	hours, err := c.d.Ops.Usage(r.Context(), admin.UsageQuery{Resource: name, From: from, To: to, GroupBy: quota.GroupByHour})
	if err != nil {
		c.fail(w, r, statusOf(err), err.Error())
		return
	}
	clients, err := c.d.Ops.Usage(r.Context(), admin.UsageQuery{Resource: name, From: hours.From, To: hours.To, GroupBy: quota.GroupByClient})
	if err != nil {
		c.fail(w, r, statusOf(err), err.Error())
		return
	}
	lines, err := c.d.Ops.Usage(r.Context(), admin.UsageQuery{Resource: name, From: hours.From, To: hours.To, GroupBy: quota.GroupByLine})
	if err != nil {
		c.fail(w, r, statusOf(err), err.Error())
		return
	}
	if len(lines.Groups) == 1 && lines.Groups[0].Key == "" {
		lines.Groups = nil // no business lines: nothing to split
	}
	var granted int64
	for _, g := range clients.Groups {
		granted += g.Granted
	}
	chart := chartData{Unit: hours.Policy.QuotaType.Unit(), From: hours.From.Truncate(time.Hour).Unix(), To: hours.To.Unix(),
		X: []int64{}, Granted: []int64{}, Charged: []int64{}}
	for _, g := range hours.Groups {
		chart.X = append(chart.X, g.Start.Unix())
		chart.Granted = append(chart.Granted, g.Granted)
		chart.Charged = append(chart.Charged, g.Charged)
	}
	sort, dir := sortDir(r, "client", "client", "sessions", "granted", "charged", "leaked")
	ordered(clients.Groups, dir, func(a, b quota.UsageGroup) int {
		switch sort {
		case "sessions":
			return cmp.Compare(a.Sessions, b.Sessions)
		case "granted":
			return cmp.Compare(a.Granted, b.Granted)
		case "charged":
			return cmp.Compare(a.Charged, b.Charged)
		case "leaked":
			return cmp.Compare(a.Leaked, b.Leaked)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	rq := url.Values{"from": {hours.From.Format("2006-01-02T15:04")}, "to": {hours.To.Format("2006-01-02T15:04")}}
	c.render(w, r, http.StatusOK, "usage", page{Title: name + " usage", Nav: "resources", Data: map[string]any{
		"Usage": hours, "Clients": clients.Groups, "Lines": lines.Groups, "Granted": granted,
		"Truncated": clients.Truncated || hours.Truncated || lines.Truncated, "Chart": chart,
		"From": rq.Get("from"), "To": rq.Get("to"), "Sort": sort, "Dir": dir,
		"Base": Prefix + "/resources/" + url.PathEscape(name) + "/usage?" + rq.Encode(),
	}})
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	f := quota.AuditFilter{Resource: strings.TrimSpace(qs.Get("resource")), Actor: strings.TrimSpace(qs.Get("actor")),
		Action: strings.TrimSpace(qs.Get("action")), Limit: 50}
	if v := qs.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			c.fail(w, r, http.StatusBadRequest, "before must be an audit entry id")
			return
		}
		f.BeforeID = n
	}
	recs, err := c.d.Audit.Audit(r.Context(), f)
	if err != nil {
		c.fail(w, r, statusOf(err), err.Error())
		return
	}
	next := ""
	if len(recs) == f.Limit {
		next = Prefix + "/audit?" + url.Values{"resource": {f.Resource}, "actor": {f.Actor}, "action": {f.Action},
			"before": {strconv.FormatInt(recs[len(recs)-1].ID, 10)}}.Encode()
	}
	c.render(w, r, http.StatusOK, "audit", page{Title: "Audit log", Nav: "audit", Data: map[string]any{
		"Entries": recs, "Resource": f.Resource, "Actor": f.Actor, "Action": f.Action, "Actions": auditActions, "Next": next,
	}})
}

// auditActions are the actions the audit page offers to filter by.
var auditActions = []string{"policy.put", "policy.delete", "policy.reset", "session.finish", "pools.put", "line.put",
	"line.delete", "grant.add", "grant.void", "buffer.release", "reclaim.confirm", "reclaim.cancel"}

// statusOf maps a domain error (its quota.CodeOf) to the page's HTTP
// status; what the page cannot name is a 503.
func statusOf(err error) int {
	switch quota.CodeOf(err) {
	case quota.CodeInvalidArgument:
		return http.StatusBadRequest
	case quota.CodeResourceNotFound, quota.CodeSessionNotFound, quota.CodeNotFound:
		return http.StatusNotFound
	case quota.CodePolicyInUse, quota.CodeSessionNotActive, quota.CodeSessionConflict, quota.CodeConflict:
		return http.StatusConflict
	}
	return http.StatusServiceUnavailable
}
