package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/quota"
)

// policyFields reads the settings the "Edit the policy" and "New policy"
// forms share: limit (a whole number ≥ 1), reset cron (empty: never), time
// zone (empty: UTC), leak threshold (whole seconds ≥ 1) and fail mode
// (CLOSED or OPEN). msg says what is wrong when one is refused; cron and
// zone are checked by the service (quota.Service.ValidatePolicy).
func policyFields(f url.Values) (p quota.Policy, msg string) {
	limit, ok := wholeNumber(f.Get("limit"))
	if !ok || limit < 1 {
		return p, "nothing was changed: the limit must be a whole number, at least 1"
	}
	leak, ok := wholeNumber(f.Get("leak"))
	if !ok || leak < 1 {
		return p, "nothing was changed: the leak threshold must be a whole number of seconds, at least 1"
	}
	mode := f.Get("failmode")
	if mode != "CLOSED" && mode != "OPEN" {
		return p, "nothing was changed: the fail mode must be CLOSED or OPEN"
	}
	zone := strings.TrimSpace(f.Get("timezone"))
	if zone == "" {
		zone = "UTC"
	}
	return quota.Policy{TotalLimit: limit, ResetCron: strings.TrimSpace(f.Get("cron")), Timezone: zone,
		LeakThresholdSeconds: leak, FailMode: quota.FailMode(mode)}, ""
}

// editPolicy changes a policy's settings from the resource page's "Edit
// the policy" form (issue 21 §3: more than its limit): limit, reset
// schedule and its time zone, leak threshold and fail mode, sent as one
// JSON merge patch (PATCH /admin/policies/{r}'s rules: a bad cron or zone
// is refused and nothing changes). Every field is required; the form
// comes filled with the current values.
func (c *Console) editPolicy(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	reason, ok := c.confirmed(w, r)
	if !ok {
		return
	}
	p, msg := policyFields(r.PostForm)
	if msg != "" {
		c.fail(w, r, http.StatusBadRequest, msg)
		return
	}
	patch, err := json.Marshal(map[string]any{"totalLimit": p.TotalLimit, "resetCron": p.ResetCron,
		"timezone": p.Timezone, "leakThresholdSeconds": p.LeakThresholdSeconds, "failMode": p.FailMode})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	if _, err := c.d.Ops.PatchPolicy(r.Context(), name, patch, false, reason); err != nil {
		c.fail(w, r, statusOf(err), "nothing was changed: "+err.Error())
		return
	}
	back(w, r, name, "Policy changed.")
}

// createPolicy makes a new policy from the resources page's "New policy"
// form: name, quota type and the settings of policyFields, stored by
// admin.Service.CreatePolicy (PUT /admin/policies/{r}'s call and checks,
// audited as the signed-in admin). A name that already has a policy is
// refused (409), never replaced; every bad field is a 400; either way
// nothing is stored.
func (c *Console) createPolicy(w http.ResponseWriter, r *http.Request) {
	reason, ok := c.confirmed(w, r)
	if !ok {
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if err := quota.ValidateResourceName(name); err != nil {
		c.fail(w, r, http.StatusBadRequest, "nothing was created: "+err.Error())
		return
	}
	qt := quota.QuotaType(r.PostForm.Get("type"))
	if !qt.Valid() {
		c.fail(w, r, http.StatusBadRequest, "nothing was created: the quota type must be DURATION, COUNT, TOKENS or BANDWIDTH")
		return
	}
	p, msg := policyFields(r.PostForm)
	if msg != "" {
		c.fail(w, r, http.StatusBadRequest, strings.Replace(msg, "changed", "created", 1))
		return
	}
	p.ResourceName, p.QuotaType = name, qt
	if _, err := c.d.Ops.CreatePolicy(r.Context(), p, reason); err != nil {
		c.fail(w, r, statusOf(err), "nothing was created: "+err.Error())
		return
	}
	back(w, r, name, "Policy "+name+" created.")
}
