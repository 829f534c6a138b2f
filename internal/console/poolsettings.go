package console

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/pools"
)

// poolSettings replaces a resource's pool settings from the Pools tab's
// "Pool settings" form (issue 21 §3): the shared, dedicated and buffer
// shares (percent of the limit, summing to 100), the borrowing limit
// (percent of a line's dedicated part, 0 … 1000), elasticity, the reclaim
// threshold (percent), the reclaim confirmation delay (seconds) and dry
// run, stored by the call PUT /admin/policies/{r}/pools makes
// (admin.Pools.PutSettings: pools.Settings.Validate's rules, audited as
// the signed-in admin with the reason). Every number is required (the form
// comes filled with the current values); a bad one is a 400 and nothing
// changes.
func (c *Console) poolSettings(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "resourceName")
	ctx, ok := c.poolsChange(w, r)
	if !ok {
		return
	}
	f := r.PostForm
	var s pools.Settings
	for _, n := range []struct {
		field, what string
		to          *int64
	}{
		{"shared", "the shared share", &s.SharedPercent}, {"dedicated", "the dedicated share", &s.DedicatedPercent},
		{"buffer", "the buffer share", &s.BufferPercent}, {"borrow", "the borrowing limit", &s.BorrowLimitPercent},
		{"reclaimat", "the reclaim threshold", &s.ReclaimThresholdPercent},
		{"confirmafter", "the reclaim confirmation delay", &s.ReclaimConfirmSeconds},
	} {
		v, ok := wholeNumber(f.Get(n.field))
		if !ok {
			c.fail(w, r, http.StatusBadRequest, "nothing was changed: "+n.what+" must be a whole number, 0 or more")
			return
		}
		*n.to = v
	}
	s.Elasticity = pools.Elasticity(strings.TrimSpace(f.Get("elasticity")))
	s.ReclaimDryRun = f.Get("dryrun") == "yes"
	if _, err := c.d.Pools.PutSettings(ctx, name, s); err != nil {
		c.fail(w, r, statusOf(err), "nothing was changed: "+err.Error())
		return
	}
	backToPools(w, r, name, "Pool settings changed.")
}
