package httpapi

import (
	"encoding/json"
	"errors"
	"math"
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

// parseAuditQuery reads resource (a resource name), actor, action, limit (1 … 500,
// default 100) and before (an entry id ≥ 1); any other parameter, a repeated
// one or a malformed value is a *quota.ValidationError. It only parses:
// the bounds are quota.AuditFilter.Validate's, where a value that is no
// whole number, and a limit or before of 0 (which the domain reads as "the
// default" and "from the newest" but the query must not say), stand as -1.
func parseAuditQuery(raw string) (quota.AuditFilter, error) {
	f := quota.AuditFilter{Limit: quota.DefaultAuditLimit}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return f, &quota.ValidationError{Field: "query", Reason: "is not a valid query string"}
	}
	resourceField := "resource"
	for k, v := range q {
		if len(v) > 1 {
			return f, &quota.ValidationError{Field: k, Reason: "is given twice"}
		}
		switch k {
		case "resourceName", "resource": // resource: the name before resourceName was used everywhere
			if _, both := q["resourceName"]; both && k == "resource" {
				return f, &quota.ValidationError{Field: "resource", Reason: "give resourceName or resource (its old name), not both"}
			}
			if v[0] == "" {
				v[0] = "." // present but empty: not a resource name, unlike an absent one
			}
			f.Resource, resourceField = v[0], k
		case "actor", "action":
			if v[0] == "" {
				return f, &quota.ValidationError{Field: k, Reason: "must not be empty (leave it out for any)"}
			}
			if k == "actor" {
				f.Actor = v[0]
			} else {
				f.Action = v[0]
			}
		case "limit":
			f.Limit = int(wholeOrInvalid(v[0], quota.MaxAuditLimit))
		case "before":
			f.BeforeID = wholeOrInvalid(v[0], math.MaxInt64)
		default:
			return f, &quota.ValidationError{Field: k, Reason: "is not a known query parameter (resourceName, actor, action, limit, before)"}
		}
	}
	if err := f.Validate(); err != nil {
		var ve *quota.ValidationError
		if errors.As(err, &ve) && ve.Field == "resource" {
			ve.Field = resourceField
		}
		return f, err
	}
	return f, nil
}

// wholeOrInvalid is s as a whole number from 1, capped at most+1 (still
// out of bounds, never overflowing an int), or -1 when it is none.
func wholeOrInvalid(s string, most int64) int64 {
	n, ok := queryInt(s)
	switch {
	case !ok || n < 1:
		return -1
	case n > most:
		return min(n, most+1)
	}
	return n
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
