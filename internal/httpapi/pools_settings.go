package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-chi/chi/v5"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/strictjson"
)

// The pool settings: PUT …/pools, and the "pools" member of PUT and PATCH
// /admin/policies/{r}.

func (s *Server) handlePutPools(w http.ResponseWriter, r *http.Request) {
	body := pools.DefaultSettings()
	err := settingsRange(decodeNoNull(r, &body))
	if err == nil {
		if _, err = s.pools.Lines.PutSettings(r.Context(), chi.URLParam(r, "resourceName"), body); err == nil {
			s.writePools(w, r, http.StatusOK)
			return
		}
	}
	s.writeError(w, r, err)
}

// settingRanges are the ranges of the whole-number pool settings
// (pools.Settings.Validate).
var settingRanges = map[string]string{
	"sharedPercent": "0 … 100", "dedicatedPercent": "0 … 100", "bufferPercent": "0 … 100",
	"borrowLimitPercent": "0 … 1000", "reclaimThresholdPercent": "1 … 100", "reclaimConfirmSeconds": "0 … 86400",
}

// settingsRange adds its range to a decoding error of a whole-number pool
// setting ("must be a whole number (0 … 100)").
func settingsRange(err error) error {
	var ve *quota.ValidationError
	if errors.As(err, &ve) && ve.Reason == reasonWholeNumber && settingRanges[ve.Field] != "" {
		return &quota.ValidationError{Field: ve.Field, Reason: ve.Reason + " (" + settingRanges[ve.Field] + ")"}
	}
	return err
}

// policyPools is the "pools" member of PUT and PATCH /admin/policies/{r}:
// the policy's pool settings.
type policyPools struct {
	set *pools.Settings // nil: not given
}

// parsePolicyPools reads a "pools" member (raw; nil = absent) over base,
// strictly, and checks it and the limit the policy will have against the
// resource's lines, before anything is written. Errors:
// *quota.ValidationError (fields "pools", "pools.<name>", "totalLimit").
func (s *Server) parsePolicyPools(r *http.Request, resource string, limit int64, base pools.Settings, raw json.RawMessage, patch bool) (policyPools, error) {
	if raw == nil {
		return policyPools{}, nil
	}
	if s.pools.Lines == nil {
		return policyPools{}, &quota.ValidationError{Field: "pools", Reason: "this server has no business lines and pools"}
	}
	if patch {
		doc, _ := json.Marshal(base)
		merged, err := jsonpatch.MergePatch(doc, raw)
		if err != nil {
			return policyPools{}, &quota.ValidationError{Field: "pools", Reason: "is not a valid merge patch: " + err.Error()}
		}
		raw = merged
	}
	set := base
	err := error(nil)
	if !patch { // in a merge patch, null is the member's default
		err = strictjson.NoNullMember(raw)
	}
	if err == nil {
		err = strictjson.Unmarshal(raw, &set)
	}
	if err != nil {
		// Worded as PUT …/pools words it, the field named within "pools".
		var ve *quota.ValidationError
		if err = settingsRange(err); errors.As(err, &ve) {
			field := "pools"
			if ve.Field != "body" {
				field += "." + ve.Field
			}
			err = &quota.ValidationError{Field: field, Reason: ve.Reason}
		}
		return policyPools{}, err
	}
	if limit < 0 { // the patched limit is not a number: PatchPolicy refuses it
		return policyPools{set: &set}, set.Validate()
	}
	return policyPools{set: &set}, s.pools.Lines.CheckLayout(r.Context(), resource, limit, &set)
}

// policyWithPools is the answer of PUT and PATCH /admin/policies/{r}: the
// policy, and the pool settings when the request set them.
type policyWithPools struct {
	quota.PolicyView
	Pools *pools.Settings `json:"pools,omitempty"`
}

// storedSettings are a resource's pool settings as stored now (the
// defaults for a resource without a policy), the audit's before of a
// policy PUT that stores new ones. Errors: quota.ErrUnavailable.
func (s *Server) storedSettings(r *http.Request, resource string) (pools.Settings, error) {
	c, err := s.pools.Lines.Config(r.Context(), resource)
	if errors.Is(err, quota.ErrResourceNotFound) {
		return pools.DefaultSettings(), nil
	}
	return c.Settings, err
}

// store writes the settings after the policy (the layout is cut from its
// new limit): a new policy's, and a PATCH's.
func (p policyPools) store(s *Server, r *http.Request, resource string, out *policyWithPools) error {
	if p.set == nil {
		return nil
	}
	if _, err := s.pools.Lines.PutSettings(r.Context(), resource, *p.set); err != nil {
		return err
	}
	out.Pools = p.set
	return nil
}

// patchPolicyPools takes the "pools" member out of a PATCH
// /admin/policies/{r} body and checks it, merged over the current settings
// ("pools": null resets them to the defaults), against the limit the patch
// leaves; it returns the rest of the patch, and only = the patch had
// nothing else. Nothing is written.
func (s *Server) patchPolicyPools(r *http.Request, resource string, patch json.RawMessage) (rest json.RawMessage, pp policyPools, only bool, err error) {
	var members map[string]json.RawMessage
	if json.Unmarshal(patch, &members) != nil || members["pools"] == nil {
		return patch, policyPools{}, false, nil // PatchPolicy answers a body that is not an object
	}
	raw := members["pools"]
	delete(members, "pools")
	if s.pools.Lines == nil {
		return nil, policyPools{}, false, &quota.ValidationError{Field: "pools", Reason: "this server has no business lines and pools"}
	}
	c, err := s.pools.Lines.Config(r.Context(), resource)
	if err != nil {
		return nil, policyPools{}, false, err
	}
	limit := c.Policy.TotalLimit
	if v, ok := members["totalLimit"]; ok {
		if limit, err = parseAmount("totalLimit", v, true); err != nil {
			limit = -1 // PatchPolicy refuses it
		}
	}
	base, isPatch := c.Settings, true
	if string(bytes.TrimSpace(raw)) == "null" {
		base, raw, isPatch = pools.DefaultSettings(), json.RawMessage("{}"), false
	}
	if pp, err = s.parsePolicyPools(r, resource, limit, base, raw, isPatch); err != nil {
		return nil, policyPools{}, false, err
	}
	rest, _ = json.Marshal(members)
	return rest, pp, len(members) == 0, nil
}
