package mysqlstore

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// PooledOf says which of resources use pools: those with a business line,
// or with a grant or buffer release (voided or not) that expires after
// since (Unix milliseconds; the grants Grants lists with that since). One
// query per lookupChunk names (issue 23 §1: the pool gauges read each
// used resource's lines, settings and grants, ~7 queries each, at every
// scrape of a changed resource). Names absent from the map use none.
// Errors: one wrapping quota.ErrUnavailable when the database cannot be
// reached.
func (s *Store) PooledOf(ctx context.Context, resources []string, since int64) (map[string]bool, error) {
	out := map[string]bool{}
	for len(resources) > 0 {
		chunk := resources[:min(len(resources), lookupChunk)]
		resources = resources[len(chunk):]
		q, args, err := sqlx.In(`SELECT resource_name FROM quota_line WHERE resource_name IN (?)
			UNION SELECT resource_name FROM quota_grant WHERE resource_name IN (?) AND expires_ms > ?`, chunk, chunk, since)
		if err != nil {
			return nil, err
		}
		var names []string
		qctx, cancel := s.withTimeout(ctx)
		err = s.db.SelectContext(qctx, &names, s.db.Rebind(q), args...)
		cancel()
		if err != nil {
			return nil, translate("pooled resources", err)
		}
		for _, r := range names {
			out[r] = true
		}
	}
	return out, nil
}
