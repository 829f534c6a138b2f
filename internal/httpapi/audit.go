package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/quotacenter/quota-center/internal/quota"
)

// auditEntryJSON is one entry of GET /admin/audit. Before is null when the
// change created the object.
type auditEntryJSON struct {
	ID       int64           `json:"id"`
	At       string          `json:"at"` // RFC 3339, UTC, milliseconds
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	Resource string          `json:"resource"`
	Before   json.RawMessage `json:"before"`
	After    json.RawMessage `json:"after"`
	Reason   string          `json:"reason"` // "" when none was given
}

type auditResponse struct {
	Success bool             `json:"success"`
	Code    string           `json:"code"`
	Entries []auditEntryJSON `json:"entries"`
}

// handleAudit answers GET /admin/audit?resource=&limit=&before=: the audit
// log, newest first; the next page is before=<the last entry's id>.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	f, err := parseAuditQuery(r.URL.RawQuery)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	recs, err := s.svc.Audit(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := auditResponse{Success: true, Code: CodeSuccess, Entries: make([]auditEntryJSON, len(recs))}
	for i, rec := range recs {
		out.Entries[i] = auditEntryJSON{
			ID: rec.ID, At: ts(rec.At), Actor: rec.Actor, Action: rec.Action, Resource: rec.Resource,
			Before: rec.Before, After: rec.After, Reason: rec.Reason,
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// parseAuditQuery reads resource (a resource name), limit (1 … 500,
// default 100) and before (an entry id ≥ 1); any other parameter, a repeated
// one or a malformed value is a *quota.ValidationError.
func parseAuditQuery(raw string) (quota.AuditFilter, error) {
	f := quota.AuditFilter{Limit: quota.DefaultAuditLimit}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return f, &quota.ValidationError{Field: "query", Reason: "is not a valid query string"}
	}
	for k, v := range q {
		if len(v) > 1 {
			return f, &quota.ValidationError{Field: k, Reason: "is given twice"}
		}
		switch k {
		case "resourceName", "resource": // resource: the name before resourceName was used everywhere
			if _, both := q["resourceName"]; both && k == "resource" {
				return f, &quota.ValidationError{Field: "resource", Reason: "give resourceName or resource (its old name), not both"}
			}
			if err := quota.ValidateResourceName(v[0]); err != nil {
				return f, &quota.ValidationError{Field: k, Reason: "must be 1 to 64 characters of [a-z0-9_.-]"}
			}
			f.Resource = v[0]
		case "limit":
			n, ok := queryInt(v[0])
			if !ok || n < 1 || n > quota.MaxAuditLimit {
				return f, &quota.ValidationError{Field: "limit", Reason: "must be a whole number from 1 to " + strconv.Itoa(quota.MaxAuditLimit)}
			}
			f.Limit = int(n)
		case "before":
			n, ok := queryInt(v[0])
			if !ok || n < 1 {
				return f, &quota.ValidationError{Field: "before", Reason: "must be an audit entry id (a whole number, at least 1)"}
			}
			f.BeforeID = n
		default:
			return f, &quota.ValidationError{Field: k, Reason: "is not a known query parameter (resourceName, limit, before)"}
		}
	}
	return f, nil
}

// queryInt parses a plain decimal integer: no sign, no leading zeros, no
// spaces.
func queryInt(s string) (int64, bool) {
	if !isInteger(s) || s[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
