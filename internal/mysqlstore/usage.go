package mysqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/quotacenter/quota-center/internal/quota"
)

// usageSums are the aggregate columns of Usage over raw ledger rows, the
// same for each grouping.
const usageSums = `COUNT(*) AS sessions,
	COALESCE(SUM(CASE WHEN status = 'USING' THEN 1 ELSE 0 END), 0) AS open,
	COALESCE(SUM(granted_amount), 0) AS granted,
	COALESCE(SUM(CASE WHEN status <> 'USING' THEN charged_amount ELSE 0 END), 0) AS charged,
	COALESCE(SUM(CASE WHEN status = 'USING' THEN charged_amount ELSE 0 END), 0) AS reserved,
	COALESCE(SUM(refunded_amount), 0) AS refunded,
	COALESCE(SUM(overage_amount), 0) AS overage,
	COALESCE(SUM(CASE WHEN status = 'LEAKED' OR leak_recovered = 1 THEN 1 ELSE 0 END), 0) AS leaked`

// rollupSumsCols are the same columns over quota_usage_rollup: rolled-up
// rows are settled, so nothing is open or reserved.
const rollupSumsCols = `SUM(sessions) AS sessions, 0 AS open, SUM(granted) AS granted,
	SUM(charged) AS charged, 0 AS reserved, SUM(refunded) AS refunded,
	SUM(overage) AS overage, SUM(leaked) AS leaked`

// usageKey is the group key of a grouping over raw rows (start_ms) or
// rollups (hour_ms).
func usageKey(groupBy, timeCol string) (string, error) {
	switch groupBy {
	case quota.GroupByClient:
		return `client_id`, nil
	case quota.GroupByLine:
		return `business_line`, nil
	case quota.GroupByHour:
		return timeCol + ` - ` + timeCol + ` % 3600000`, nil
	case quota.GroupByDay:
		return timeCol + ` - ` + timeCol + ` % 86400000`, nil
	}
	return "", fmt.Errorf("unknown grouping %q", groupBy)
}

// UsageSQL is the statement Usage runs over raw ledger rows for a grouping
// (client, line, hour or day), with the arguments resource, from ms, to ms
// and the group limit. It is exported for the query-plan check
// (docs/operations.md shows its EXPLAIN).
func UsageSQL(groupBy string) (string, error) {
	key, err := usageKey(groupBy, "start_ms")
	if err != nil {
		return "", err
	}
	return `SELECT ` + key + ` AS k, ` + usageSums + `
	FROM quota_usage WHERE resource_name = ? AND start_ms >= ? AND start_ms < ?
	GROUP BY k ORDER BY k LIMIT ?`, nil
}

// UsageRollupSQL is the statement Usage runs over quota_usage_rollup (rows
// the ledger's lifecycle rolled up) for a grouping, with the arguments
// resource, from hour ms, to ms and the group limit: a range of its primary
// key (resource_name, hour_ms, …).
func UsageRollupSQL(groupBy string) (string, error) {
	key, err := usageKey(groupBy, "hour_ms")
	if err != nil {
		return "", err
	}
	return `SELECT ` + key + ` AS k, ` + rollupSumsCols + `
	FROM quota_usage_rollup WHERE resource_name = ? AND hour_ms >= ? AND hour_ms < ?
	GROUP BY k ORDER BY k LIMIT ?`, nil
}

// UsageDeferredSQL is the statement Usage runs over the rows below the
// watermark that the rollups leave out (listed in
// quota_usage_rollup_deferred: LEAKED or CANCELLED rows that may still
// change, lifecycledeferred.go), read raw, for a grouping, with the
// arguments resource, from hour ms (twice), rollup bound ms (min(to,
// watermark)), the bound of the list's range (listedBefore) and the
// watermark ms, and the group limit. A listed row
// counts as a rolled-up one would (by its hour) while it still starts
// where it was listed, below the watermark; a revived one takes its
// retry's start, and is one of UsageSQL's or listed again there.
func UsageDeferredSQL(groupBy string) (string, error) {
	key, err := usageKey(groupBy, "start_ms")
	if err != nil {
		return "", err
	}
	return `SELECT ` + key + ` AS k, ` + usageSums + `
	FROM (SELECT q.client_id, q.business_line, q.start_ms, q.status, q.leak_recovered,
			q.granted_amount, q.charged_amount, q.refunded_amount, q.overage_amount
		FROM quota_usage_rollup_deferred d JOIN quota_usage q ON q.id = d.id AND q.start_ms = d.start_ms
		WHERE d.resource_name = ? AND d.start_ms >= ? AND q.start_ms >= ?
		AND q.start_ms - q.start_ms % 3600000 < ? AND d.start_ms < ? AND q.start_ms < ?) r
	GROUP BY k ORDER BY k LIMIT ?`, nil
}

// listedBefore bounds the starts of the listed rows a usage read over the
// rolled-up range up to b = min(to, watermark) may count: those of hours
// before b, and before the watermark w.
func listedBefore(b, w int64) int64 {
	return min(w, b+(3600000-b%3600000)%3600000)
}

// usageGroupRow is one group as read.
type usageGroupRow struct {
	Key      string `db:"k"`
	Sessions int64  `db:"sessions"`
	Open     int64  `db:"open"`
	Granted  int64  `db:"granted"`
	Charged  int64  `db:"charged"`
	Reserved int64  `db:"reserved"`
	Refunded int64  `db:"refunded"`
	Overage  int64  `db:"overage"`
	Leaked   int64  `db:"leaked"`
}

// Usage sums q.Resource's ledger rows that started in [q.From, q.To) per
// group (see quota.UsageQuery); hours and days are UTC. Rows that started
// before the resource's lifecycle watermark are read from their rolled-up
// hourly sums (UsageRollupSQL), the rest from the raw rows (UsageSQL, the
// index idx_quota_usage_start only), and the rows below it that the
// rollups leave out (UsageDeferredSQL, LEAKED or CANCELLED rows that may
// still change), all in one read snapshot. In the
// rolled-up range a session counts by its hour: there q.From is taken down
// and q.To up to whole UTC hours (bounds on whole hours answer exactly as
// the raw rows did). Errors: one wrapping quota.ErrUnavailable when the
// database cannot be reached.
func (s *Store) Usage(ctx context.Context, q quota.UsageQuery) (quota.UsageResult, error) {
	rawSQL, err := UsageSQL(q.GroupBy)
	if err != nil {
		return quota.UsageResult{}, err
	}
	rollSQL, _ := UsageRollupSQL(q.GroupBy) // the same groupings
	defSQL, _ := UsageDeferredSQL(q.GroupBy)
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	tx, err := s.readTx(ctx)
	if err != nil {
		return quota.UsageResult{}, translate("usage "+q.Resource, err)
	}
	defer func() { _ = tx.Rollback() }()
	from, to := msOf(q.From), msOf(q.To)
	var w int64
	if err := tx.GetContext(ctx, &w, rolledToSQL, q.Resource); err != nil {
		return quota.UsageResult{}, translate("usage "+q.Resource, err)
	}
	var rolled, deferred, raw []usageGroupRow
	if from < w {
		fromHour := from - from%3600000
		if err := tx.SelectContext(ctx, &rolled, rollSQL, q.Resource, fromHour, min(to, w), q.MaxGroups+1); err != nil {
			return quota.UsageResult{}, translate("usage rollups "+q.Resource, err)
		}
		if err := tx.SelectContext(ctx, &deferred, defSQL, q.Resource, fromHour, fromHour, min(to, w),
			listedBefore(min(to, w), w), w, q.MaxGroups+1); err != nil {
			return quota.UsageResult{}, translate("usage deferred rows "+q.Resource, err)
		}
	}
	if to > max(from, w) {
		if err := tx.SelectContext(ctx, &raw, rawSQL, q.Resource, max(from, w), to, q.MaxGroups+1); err != nil {
			return quota.UsageResult{}, translate("usage "+q.Resource, err)
		}
	}
	return usageResult(q, mergeUsage(q.GroupBy, rolled, deferred, raw))
}

// mergeUsage adds group lists, each in key order and each cut after the
// first MaxGroups+1 keys, into one in key order. Its first MaxGroups+1
// groups are exact: a key among them has fewer smaller keys in every list.
func mergeUsage(groupBy string, lists ...[]usageGroupRow) []usageGroupRow {
	nonEmpty := slices.DeleteFunc(slices.Clone(lists), func(l []usageGroupRow) bool { return len(l) == 0 })
	switch len(nonEmpty) {
	case 0:
		return nil
	case 1:
		return nonEmpty[0]
	}
	all := slices.Concat(nonEmpty...)
	byKey := make(map[string]usageGroupRow, len(all))
	for _, r := range all {
		g := byKey[r.Key]
		byKey[r.Key] = usageGroupRow{Key: r.Key, Sessions: g.Sessions + r.Sessions, Open: g.Open + r.Open,
			Granted: g.Granted + r.Granted, Charged: g.Charged + r.Charged, Reserved: g.Reserved + r.Reserved,
			Refunded: g.Refunded + r.Refunded, Overage: g.Overage + r.Overage, Leaked: g.Leaked + r.Leaked}
	}
	out := make([]usageGroupRow, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, r)
	}
	numeric := groupBy == quota.GroupByHour || groupBy == quota.GroupByDay
	slices.SortFunc(out, func(x, y usageGroupRow) int {
		if numeric {
			xi, _ := strconv.ParseInt(x.Key, 10, 64)
			yi, _ := strconv.ParseInt(y.Key, 10, 64)
			return cmp.Compare(xi, yi)
		}
		return cmp.Compare(x.Key, y.Key)
	})
	return out
}

// usageResult turns the groups read into the answer (at most q.MaxGroups).
func usageResult(q quota.UsageQuery, rows []usageGroupRow) (quota.UsageResult, error) {
	out := quota.UsageResult{Groups: make([]quota.UsageGroup, 0, len(rows))}
	if len(rows) > q.MaxGroups {
		rows, out.Truncated = rows[:q.MaxGroups], true
	}
	for _, r := range rows {
		g := quota.UsageGroup{Sessions: r.Sessions, Open: r.Open, Granted: r.Granted, Charged: r.Charged,
			Reserved: r.Reserved, Refunded: r.Refunded, Overage: r.Overage, Leaked: r.Leaked}
		if q.GroupBy == quota.GroupByClient || q.GroupBy == quota.GroupByLine {
			g.Key = r.Key
		} else {
			var ms int64
			if _, err := fmt.Sscan(r.Key, &ms); err != nil {
				return quota.UsageResult{}, fmt.Errorf("usage %s: bucket %q: %w", q.Resource, r.Key, err)
			}
			g.Start = timeOf(ms)
		}
		out.Groups = append(out.Groups, g)
	}
	return out, nil
}
