package mysqlstore

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/quota"
)

// PoliciesOf reads the policies of resources, lookupChunk names a query
// (unique index on resource_name): what the background loops need of the
// active resources, without reading every policy (issue 23 §1). Names
// without a policy are absent from the map. Errors: one wrapping
// quota.ErrUnavailable when the database cannot be reached.
func (s *Store) PoliciesOf(ctx context.Context, resources []string) (map[string]quota.Policy, error) {
	out := make(map[string]quota.Policy, len(resources))
	for len(resources) > 0 {
		chunk := resources[:min(len(resources), lookupChunk)]
		resources = resources[len(chunk):]
		q, args, err := sqlx.In(`SELECT `+policyColumns+` FROM quota_policy WHERE resource_name IN (?)`, chunk)
		if err != nil {
			return nil, err
		}
		var rows []policyRow
		qctx, cancel := s.withTimeout(ctx)
		err = s.db.SelectContext(qctx, &rows, s.db.Rebind(q), args...)
		cancel()
		if err != nil {
			return nil, translate("policies of resources", err)
		}
		for _, r := range rows {
			p := r.policy()
			out[p.ResourceName] = p
		}
	}
	return out, nil
}
