package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/display"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/strictjson"
)

// confirmed checks the two things every action asks for: the confirmation
// box and a reason. It answers 400 itself when one is missing.
func (c *Console) confirmed(w http.ResponseWriter, r *http.Request) (string, bool) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	switch {
	case r.PostForm.Get("confirm") != "yes":
		c.fail(w, r, http.StatusBadRequest, "nothing was changed: tick the confirmation box")
	case reason == "":
		c.fail(w, r, http.StatusBadRequest, "nothing was changed: give a reason (it goes into the audit log)")
	default:
		return reason, true
	}
	return "", false
}

// wholeNumber reads an amount typed into a form: digits, optionally
// grouped with commas ("18,000"), read as the JSON API reads a number
// (strictjson.IsInteger): no sign, no leading zero, no fraction, at most
// 2^53−1. ok is false for anything else.
func wholeNumber(s string) (n int64, ok bool) {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	if !strictjson.IsInteger(s) || s[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n <= quota.MaxAmount
}

func back(w http.ResponseWriter, r *http.Request, resource, msg string) {
	http.Redirect(w, r, Prefix+"/resources/"+url.PathEscape(resource)+"?done="+url.QueryEscape(msg), http.StatusSeeOther)
}

func (c *Console) changeLimit(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	reason, ok := c.confirmed(w, r)
	if !ok {
		return
	}
	limit, ok := wholeNumber(r.PostForm.Get("limit"))
	if !ok || limit < 1 {
		c.fail(w, r, http.StatusBadRequest, "nothing was changed: the limit must be a whole number, at least 1")
		return
	}
	p, err := c.d.Ops.PatchPolicy(r.Context(), name, []byte(fmt.Sprintf(`{"totalLimit":%d}`, limit)), false, reason)
	if err != nil {
		c.fail(w, r, statusOf(err), "nothing was changed: "+err.Error())
		return
	}
	back(w, r, name, "Limit changed to "+display.Amount(p.QuotaType.Unit(), p.TotalLimit)+".")
}

func (c *Console) resetPeriod(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	reason, ok := c.confirmed(w, r)
	if !ok {
		return
	}
	_, cur, err := c.d.Ops.Reset(r.Context(), name, reason)
	if err != nil {
		c.fail(w, r, statusOf(err), "the period was not reset: "+err.Error())
		return
	}
	back(w, r, name, "A new period started at "+cur.Start.UTC().Format("2006-01-02 15:04:05Z")+".")
}

// grant adds a temporary grant (release false) or releases reserve from the
// buffer (release true): amount, until (UTC, required for a grant), an
// optional business line, a reason and the confirmation.
func (c *Console) grant(release bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "resourceName")
		if c.d.Pools == nil {
			c.fail(w, r, http.StatusNotFound, "this server has no reserve pool or temporary grants")
			return
		}
		reason, ok := c.confirmed(w, r)
		if !ok {
			return
		}
		req := admin.GrantRequest{Reason: reason, Line: strings.TrimSpace(r.PostForm.Get("line"))}
		n, ok := wholeNumber(r.PostForm.Get("amount"))
		if !ok || n < 1 {
			c.fail(w, r, http.StatusBadRequest, "nothing was changed: the amount must be a whole number, at least 1")
			return
		}
		req.Amount = n
		if v := strings.TrimSpace(r.PostForm.Get("until")); v != "" {
			t, err := time.Parse("2006-01-02T15:04", v)
			if err != nil {
				c.fail(w, r, http.StatusBadRequest, "nothing was changed: “until” must look like 2025-06-01T18:00 (UTC)")
				return
			}
			req.ExpiresMs = t.UTC().UnixMilli()
		}
		add, what := c.d.Pools.AddGrant, "Granted"
		if release {
			add, what = c.d.Pools.Release, "Released"
		}
		rec, err := add(r.Context(), name, req)
		if err != nil {
			c.fail(w, r, statusOf(err), "nothing was changed: "+err.Error())
			return
		}
		back(w, r, name, fmt.Sprintf("%s %s (%s).", what, display.Grouped(rec.Amount), rec.ID))
	}
}

func (c *Console) forceFinish(w http.ResponseWriter, r *http.Request) {
	req := admin.FinishRequest{SessionID: chi.URLParam(r, "sessionId"), ResourceName: r.PostForm.Get("resource"),
		ClientID: r.PostForm.Get("client")}
	reason, ok := c.confirmed(w, r)
	if !ok {
		return
	}
	req.Reason = reason
	if v := strings.TrimSpace(r.PostForm.Get("amount")); v != "" {
		n, ok := wholeNumber(v)
		if !ok {
			c.fail(w, r, http.StatusBadRequest, "nothing was changed: the amount must be a whole number, 0 or more (empty: the grant)")
			return
		}
		req.Amount = &n
	}
	res, row, err := c.d.Ops.ForceFinish(r.Context(), req)
	if err != nil {
		c.fail(w, r, statusOf(err), "the session was not finished: "+err.Error())
		return
	}
	back(w, r, row.ResourceName, fmt.Sprintf("Session %s finished: charged %s, refunded %s.", res.SessionID,
		display.Grouped(res.Charged), display.Grouped(res.Refunded)))
}
