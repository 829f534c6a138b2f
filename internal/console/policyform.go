package console

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

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
	f := r.PostForm
	limit, ok := wholeNumber(f.Get("limit"))
	if !ok || limit < 1 {
		c.fail(w, r, http.StatusBadRequest, "nothing was changed: the limit must be a whole number, at least 1")
		return
	}
	leak, ok := wholeNumber(f.Get("leak"))
	if !ok || leak < 1 {
		c.fail(w, r, http.StatusBadRequest, "nothing was changed: the leak threshold must be a whole number of seconds, at least 1")
		return
	}
	mode := f.Get("failmode")
	if mode != "CLOSED" && mode != "OPEN" {
		c.fail(w, r, http.StatusBadRequest, "nothing was changed: the fail mode must be CLOSED or OPEN")
		return
	}
	zone := strings.TrimSpace(f.Get("timezone"))
	if zone == "" {
		zone = "UTC"
	}
	patch, err := json.Marshal(map[string]any{"totalLimit": limit, "resetCron": strings.TrimSpace(f.Get("cron")),
		"timezone": zone, "leakThresholdSeconds": leak, "failMode": mode})
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
