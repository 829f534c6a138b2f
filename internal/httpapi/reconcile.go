package httpapi

import (
	"fmt"
	"net/http"

	"github.com/quotacenter/quota-center/internal/quota"
)

// handleReconcile runs reconciliation now: POST /admin/reconcile, optionally
// ?resourceName=X for one resource. It answers the reports; drift it could
// not repair is reported, not an error. When a resource's pass was skipped
// because another pass (of this or another instance) held its lock, the
// answer is 409 RECONCILE_SKIPPED with Retry-After: 1 and the reports (the
// skipped ones say why), so that a caller never takes a pass that did
// nothing for one that found nothing.
func (s *Server) handleReconcile(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r, "resourceName")
	if err == nil && q.Has("resourceName") {
		err = quota.ValidateResourceName(q.Get("resourceName")) // given, it names one resource
	}
	if err == nil {
		err = noBody(r) // a {"resourceName":…} body would run a pass over every resource
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	name := q.Get("resourceName")
	rep, skipped, err := s.reconcile(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if skipped > 0 {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusConflict, map[string]any{"success": false, "code": CodeReconcileSkipped,
			"message": fmt.Sprintf("%d resource(s) skipped: another reconciliation pass holds the lock; retry", skipped),
			"reports": rep})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "code": CodeSuccess, "reports": rep})
}
