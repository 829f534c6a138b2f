package httpapi

// The pools' admin inputs that need more than decoding: the grants' times,
// new line names, and what a policy delete must not leave behind.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// parseTime reads an optional RFC 3339 time as Unix ms (0 when absent).
// A time at or before 1970-01-01T00:00:00Z is refused: 0 ms means "not
// given" (now, or no expiry) to poolctl, and the grants' Redis records
// (apply.lua's activeGrants) hold only non-negative ms, so a grant that
// took effect before 1970 made every apply of its resource fail with 500.
// Errors: *quota.ValidationError of field.
func parseTime(field, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, &quota.ValidationError{Field: field, Reason: "must be an RFC 3339 time such as 2026-01-02T15:04:05Z"}
	}
	if t.UnixMilli() <= 0 {
		return 0, &quota.ValidationError{Field: field, Reason: "must be after 1970-01-01T00:00:00Z"}
	}
	return t.UnixMilli(), nil
}

// lineNameHasAlnum refuses a new line named without a letter or digit
// (".", "..", "-"), as resource names are (quota.ValidateResourceName):
// "." and ".." are path segments that browsers, curl and proxies resolve,
// so such a line, once created, could not be named in a URL to change or
// delete it. pools.ValidateLineName checks the characters. Errors:
// *quota.ValidationError.
func lineNameHasAlnum(name string) error {
	if name != "" && !strings.ContainsAny(name, "abcdefghijklmnopqrstuvwxyz0123456789") {
		return &quota.ValidationError{Field: "businessLine", Reason: "must be 1 to 64 characters of [a-z0-9_.-] with at least one letter or digit"}
	}
	return nil
}

// refuseDeleteWithPools refuses DELETE /admin/policies/{r} while the
// resource has business lines, or grants or buffer releases that are not
// voided and not expired: a delete leaves them in the policy store, and a
// policy created again under the name got them all back (and a new limit
// they did not fit was refused, naming lines that GET …/lines, answering
// 404 for the deleted policy, could not show). An unknown resource is the
// delete's to answer (404). Errors: quota.ErrPolicyInUse-coded (409),
// quota.ErrUnavailable.
func (s *Server) refuseDeleteWithPools(ctx context.Context, resource string) error {
	if s.pools.Lines == nil {
		return nil
	}
	c, err := s.pools.Lines.Config(ctx, resource)
	if errors.Is(err, quota.ErrResourceNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(c.Lines) > 0 {
		names := make([]string, 0, len(c.Lines))
		for _, l := range c.Lines {
			names = append(names, l.Name)
		}
		return quota.NewError(quota.CodePolicyInUse, fmt.Sprintf("%s has business lines (%s): delete them first "+
			"(DELETE /admin/policies/%s/lines/{line}); a delete would leave them for a policy created again under the name",
			resource, strings.Join(names, ", "), resource))
	}
	if s.pools.Grants == nil {
		return nil
	}
	gs, err := s.pools.Grants.Grants(ctx, resource)
	if err != nil {
		return err
	}
	var ids []string
	for _, g := range gs {
		if g.VoidedMs == 0 {
			ids = append(ids, g.ID)
		}
	}
	if len(ids) > 0 {
		return quota.NewError(quota.CodePolicyInUse, fmt.Sprintf("%s has grants or buffer releases not expired (%s): void them first "+
			"(DELETE /admin/policies/%s/grants/{id}); a delete would leave them for a policy created again under the name",
			resource, strings.Join(ids, ", "), resource))
	}
	return nil
}
