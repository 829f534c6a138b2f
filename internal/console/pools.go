package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/display"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// The pools page of a resource with business lines or grants (issue 21
// §3): the layout (shared, dedicated, buffer), per line what it holds, its
// tier and watermark; the grants and releases (void); the reclaims
// (confirm or cancel, with the warning); and the pool events. Its live
// part refreshes every 2 s like the session map.

// lineRow is one business line of the pools page.
type lineRow struct {
	*pools.LineState
	Own, MayUse, Used int64
	Mode              pools.Mode
	UsedPct           int64   // of MayUse
	Watermark         float64 // percent of MayUse
}

// reclaimRow is one reclaim, with its times as time.Time.
type reclaimRow struct {
	pools.Reclaim
	Warned, Updated time.Time
	Open            bool // WARNED or CONFIRMED: it may still be cancelled
}

// eventRow is one pool event, with its time.
type eventRow struct {
	pools.PoolEvent
	At time.Time
}

func (c *Console) poolsPage(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	if c.d.Pools == nil {
		c.fail(w, r, http.StatusNotFound, "this server has no pools")
		return
	}
	st, _, err := c.d.Ops.Status(r.Context(), name)
	if err != nil {
		c.fail(w, r, statusOf(err), err.Error())
		return
	}
	ps, ok, err := c.d.Pools.Status(r.Context(), name)
	if err != nil {
		c.fail(w, r, statusOf(err), "the pools could not be read: "+err.Error())
		return
	}
	data := map[string]any{"Status": st, "HasPools": ok, "Refresh": r.URL.RequestURI(), "Now": c.d.Now()}
	if ok {
		var lines []lineRow
		for _, ll := range ps.Layout.Lines {
			l := ps.Model.Lines[ll.Name]
			if l == nil {
				continue
			}
			// May use is what the API's pools status answers (mayUse) and
			// what the watermark is a fraction of: the line's reach now.
			used, reach := l.Used()+l.UsedGrant, ps.Model.Reach(l)
			lines = append(lines, lineRow{LineState: l, Own: l.OwnDedicated(), MayUse: reach, Used: used,
				Mode: ps.Settings.ModeOf(l.Mode), UsedPct: pctOf(used, reach), Watermark: float64(l.Watermark) / 100})
		}
		data["Pools"], data["Lines"] = ps, lines
		data["SharedSize"] = ps.Layout.Shared + ps.Model.SharedBuffer
		data["BufferFree"] = ps.Model.BufferFree()
	}
	now := c.d.Now().UnixMilli()
	var grants []grantRow
	for _, g := range ps.Grants {
		grants = append(grants, grantRow{GrantRecord: g, Active: g.Active(now), From: time.UnixMilli(g.EffectiveMs),
			Until: untilOf(g.ExpiresMs)})
	}
	data["Grants"] = grants
	rcs, err := c.d.Pools.Reclaims(r.Context(), name)
	if err != nil {
		c.fail(w, r, statusOf(err), "the reclaims could not be read: "+err.Error())
		return
	}
	var reclaims []reclaimRow
	open := false
	for _, rc := range rcs {
		row := reclaimRow{Reclaim: rc, Warned: time.UnixMilli(rc.WarnedMs), Updated: time.UnixMilli(rc.UpdateMs),
			Open: rc.State == pools.ReclaimWarned || rc.State == pools.ReclaimConfirmed}
		open = open || row.Open
		reclaims = append(reclaims, row)
	}
	data["Reclaims"], data["Open"] = reclaims, open
	evs, err := c.d.Pools.Events(r.Context(), name, 50)
	if err != nil {
		c.fail(w, r, statusOf(err), "the pool events could not be read: "+err.Error())
		return
	}
	var events []eventRow
	for _, e := range evs {
		events = append(events, eventRow{PoolEvent: e, At: time.UnixMilli(e.AtMs)})
	}
	data["Events"] = events
	c.render(w, r, http.StatusOK, "pools", page{Title: name + " pools", Nav: "resources", Data: data})
}

// grantRow is one grant or release of the pools page.
type grantRow struct {
	pools.GrantRecord
	Active      bool
	From, Until time.Time // Until zero: until returned
}

func untilOf(ms int64) time.Time {
	if ms >= pools.MaxAmount {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func pctOf(part, whole int64) int64 {
	if whole <= 0 {
		return 0
	}
	return part * 100 / whole
}

func backToPools(w http.ResponseWriter, r *http.Request, resource, msg string) {
	http.Redirect(w, r, Prefix+"/resources/"+url.PathEscape(resource)+"/pools?done="+url.QueryEscape(msg), http.StatusSeeOther)
}

// poolsChange checks what every pools action asks for: a server with
// pools (404 otherwise), the confirmation and a reason (400, see
// confirmed). It answers itself when one is missing; ctx carries the
// reason for the audit.
func (c *Console) poolsChange(w http.ResponseWriter, r *http.Request) (context.Context, bool) {
	if c.d.Pools == nil {
		c.fail(w, r, http.StatusNotFound, "this server has no pools")
		return nil, false
	}
	reason, ok := c.confirmed(w, r)
	return quota.WithReason(r.Context(), reason), ok
}

// voidGrant ends a grant or release now (confirmation and reason, as every
// change); what sessions hold of it stays charged. A release's notice says
// what buffer it gave back.
func (c *Console) voidGrant(w http.ResponseWriter, r *http.Request) {
	name, id := chi.URLParam(r, "resourceName"), chi.URLParam(r, "id")
	ctx, ok := c.poolsChange(w, r)
	if !ok {
		return
	}
	v, err := c.d.Pools.VoidGrant(ctx, name, id)
	if err != nil {
		c.fail(w, r, statusOf(err), "nothing was changed: "+err.Error())
		return
	}
	if v.Kind == pools.KindRelease {
		backToPools(w, r, name, fmt.Sprintf("Release %s voided: %s of its buffer returned.", id, display.Grouped(v.Returned)))
		return
	}
	backToPools(w, r, name, "Grant "+id+" voided.")
}

// reclaimStep confirms or cancels a reclaim ({step} is confirm or cancel).
func (c *Console) reclaimStep(w http.ResponseWriter, r *http.Request) {
	name, id, step := chi.URLParam(r, "resourceName"), chi.URLParam(r, "id"), chi.URLParam(r, "step")
	if c.d.Pools == nil || (step != "confirm" && step != "cancel") {
		c.fail(w, r, http.StatusNotFound, "no such action: "+step)
		return
	}
	reason, ok := c.confirmed(w, r)
	if !ok {
		return
	}
	rc, err := c.d.Pools.SetReclaim(quota.WithReason(r.Context(), reason), name, id, step == "confirm")
	if err != nil {
		c.fail(w, r, statusOf(err), "nothing was changed: "+err.Error())
		return
	}
	backToPools(w, r, name, fmt.Sprintf("Reclaim %s of %s from %s to %s is %s.", rc.ID, display.Grouped(rc.Amount), rc.From, rc.To, rc.State))
}
