package mysqlstore

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/quotacenter/quota-center/internal/quota"
)

// lookupChunk bounds the ids of one IN (…) query.
const lookupChunk = 500

// SessionsByID reads the rows of the given session ids, lookupChunk per
// query (unique index on session_id); ids without a row are absent from the
// map. Errors: one wrapping quota.ErrUnavailable when the database cannot be
// reached.
func (s *Store) SessionsByID(ctx context.Context, ids []string) (map[string]quota.UsageRecord, error) {
	out := make(map[string]quota.UsageRecord, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), lookupChunk)]
		ids = ids[len(chunk):]
		q, args, err := sqlx.In(selectUsage+`WHERE session_id IN (?)`, chunk)
		if err != nil {
			return nil, err
		}
		var rows []usageRow
		qctx, cancel := s.withTimeout(ctx)
		err = s.db.SelectContext(qctx, &rows, s.db.Rebind(q), args...)
		cancel()
		if err != nil {
			return nil, translate("sessions by id", err)
		}
		for _, r := range rows {
			rec := r.record()
			out[rec.SessionID] = rec
		}
	}
	return out, nil
}
