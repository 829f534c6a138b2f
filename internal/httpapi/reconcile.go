package httpapi

import (
	"net/http"

	"github.com/quotacenter/quota-center/internal/quota"
)

// handleReconcile runs reconciliation now: POST /admin/reconcile, optionally
// ?resourceName=X for one resource. It answers the reports; drift it could
// not repair is reported, not an error.
func (s *Server) handleReconcile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "resourceName" {
			s.writeError(w, r, &quota.ValidationError{Field: k, Reason: "is not a known query parameter"})
			return
		}
	}
	name := q.Get("resourceName")
	if name != "" {
		if err := quota.ValidateResourceName(name); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	rep, err := s.reconcile(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "code": CodeSuccess, "reports": rep})
}
