package mysqlstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// opsRows writes a small ledger of one resource: 12 sessions of two
// clients over three hours (two of them in the same millisecond), a third
// settled, one leaked, the rest open. It returns the rows as written.
func opsRows(t *testing.T, s *Store, res string) []quota.UsageRecord {
	t.Helper()
	var recs []quota.UsageRecord
	for i := range 12 {
		r := usingRec(fmt.Sprintf("%s-%02d", res, i), int64(10+i))
		r.ResourceName = res
		r.ClientID = []string{"alpha", "beta"}[i%2]
		r.StartTime = period.Add(time.Duration(i/4)*time.Hour + time.Duration(i%4)*time.Minute)
		if i == 5 {
			r.StartTime = recs[4].StartTime // a tie
		}
		recs = append(recs, r)
	}
	insertAll(t, s, recs)
	other := usingRec(res+"-other", 99)
	other.ResourceName = res + "x"
	insertAll(t, s, []quota.UsageRecord{other})
	for i := range recs {
		if i%3 == 0 {
			f := finishRec(recs[i].SessionID, 7, recs[i].GrantedAmount-7, 0, recs[i].StartTime.Add(time.Minute))
			if i == 9 {
				f = finishRec(recs[i].SessionID, 30, 0, 30-recs[i].GrantedAmount, recs[i].StartTime.Add(time.Minute))
			}
			f.ResourceName, f.ClientID = recs[i].ResourceName, recs[i].ClientID
			if err := s.FinishSession(testCtx(t), f); err != nil {
				t.Fatal(err)
			}
			recs[i].Status, recs[i].ChargedAmount, recs[i].RefundedAmount, recs[i].OverageAmount =
				quota.StatusFinished, f.ChargedAmount, f.RefundedAmount, f.OverageAmount
		}
	}
	if err := s.MarkLeaked(testCtx(t), []quota.LeakedSession{{ResourceName: res, SessionID: recs[7].SessionID,
		PeriodStart: period, Granted: recs[7].GrantedAmount, EndTime: period.Add(5 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	recs[7].Status = quota.StatusLeaked
	return recs
}

func TestUsageSumsPerClientHourAndDay(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("usage-%d", time.Now().UnixNano())
		recs := opsRows(t, s, res)
		want := map[string]map[string]quota.UsageGroup{quota.GroupByClient: {}, quota.GroupByHour: {}, quota.GroupByDay: {}}
		for _, r := range recs[1:] { // from = the second session's start
			for by, key := range map[string]string{
				quota.GroupByClient: r.ClientID,
				quota.GroupByHour:   r.StartTime.Truncate(time.Hour).Format(time.RFC3339),
				quota.GroupByDay:    r.StartTime.Truncate(24 * time.Hour).Format(time.RFC3339),
			} {
				g := want[by][key]
				g.Sessions++
				g.Granted += r.GrantedAmount
				g.Refunded += r.RefundedAmount
				g.Overage += r.OverageAmount
				switch r.Status {
				case quota.StatusUsing:
					g.Open++
					g.Reserved += r.ChargedAmount
				case quota.StatusLeaked:
					g.Leaked++
					g.Charged += r.GrantedAmount
				default:
					g.Charged += r.ChargedAmount
				}
				want[by][key] = g
			}
		}
		for by := range want {
			res, err := s.Usage(testCtx(t), quota.UsageQuery{Resource: res, From: recs[1].StartTime,
				To: period.Add(24 * time.Hour), GroupBy: by, MaxGroups: 100})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]quota.UsageGroup{}
			var keys []string
			for _, g := range res.Groups {
				k := g.Key
				if by != quota.GroupByClient {
					k = g.Start.Format(time.RFC3339)
				}
				keys = append(keys, k)
				g.Key, g.Start = "", time.Time{}
				got[k] = g
			}
			if !slices.IsSorted(keys) {
				t.Errorf("%s: groups %v not in key order", by, keys)
			}
			if len(got) != len(want[by]) {
				t.Errorf("%s: groups %v, want %v", by, got, want[by])
			}
			for k, w := range want[by] {
				if got[k] != w {
					t.Errorf("%s %s: got %+v, want %+v", by, k, got[k], w)
				}
			}
		}
		// MaxGroups cuts and says so.
		cut, err := s.Usage(testCtx(t), quota.UsageQuery{Resource: res, From: period, To: period.Add(time.Hour * 24),
			GroupBy: quota.GroupByHour, MaxGroups: 2})
		if err != nil || len(cut.Groups) != 2 || !cut.Truncated {
			t.Fatalf("MaxGroups 2: %d groups, truncated %v, %v", len(cut.Groups), cut.Truncated, err)
		}
	})
}

func TestSessionHistoryPagesNewestFirstWithFilters(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("hist-%d", time.Now().UnixNano())
		recs := opsRows(t, s, res)
		// Newest first; the tie (rows 4 and 5) by id, highest first.
		ids := map[string]int64{}
		for _, r := range recs {
			var id int64
			if err := s.db.GetContext(testCtx(t), &id, `SELECT id FROM quota_usage WHERE session_id = ?`, r.SessionID); err != nil {
				t.Fatal(err)
			}
			ids[r.SessionID] = id
		}
		order := slices.Clone(recs)
		slices.SortFunc(order, func(a, b quota.UsageRecord) int {
			if c := b.StartTime.Compare(a.StartTime); c != 0 {
				return c
			}
			return int(ids[b.SessionID] - ids[a.SessionID])
		})
		for _, tc := range []struct {
			name     string
			statuses []quota.Status
			client   string
			limit    int
			scan     int
		}{
			{"all", nil, "", 5, 6},
			{"settled", []quota.Status{quota.StatusFinished, quota.StatusLeaked}, "", 2, 3},
			{"leaked", []quota.Status{quota.StatusLeaked}, "", 1, 2},
			{"beta, narrow window", nil, "beta", 3, 3},
			{"alpha finished", []quota.Status{quota.StatusFinished}, "alpha", 10, 11},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var want, got []string
				for _, r := range order {
					if (tc.statuses == nil || slices.Contains(tc.statuses, r.Status)) && (tc.client == "" || tc.client == r.ClientID) {
						want = append(want, r.SessionID)
					}
				}
				q := quota.HistoryQuery{Resource: res, Statuses: tc.statuses, ClientID: tc.client, Limit: tc.limit, Scan: tc.scan}
				for pages := 0; ; pages++ {
					if pages > 30 {
						t.Fatal("no end after 30 pages")
					}
					p, err := s.SessionHistory(testCtx(t), q)
					if err != nil {
						t.Fatal(err)
					}
					if len(p.Rows) > tc.limit {
						t.Fatalf("page of %d rows, limit %d", len(p.Rows), tc.limit)
					}
					for _, r := range p.Rows {
						got = append(got, r.SessionID)
					}
					if !p.More {
						break
					}
					q.Before = p.Next
				}
				if !slices.Equal(got, want) {
					t.Fatalf("got %v\nwant %v", got, want)
				}
			})
		}
	})
}

// The usage and history queries read the index idx_quota_usage_start in
// order: no table scan, no filesort, and for usage not even the table rows.
// docs/operations.md shows these plans.
func TestOperatorQueriesUseTheStartIndex(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("plan-%d", time.Now().UnixNano())
		opsRows(t, s, res)
		// Enough rows of other resources that reading the whole table
		// costs more than the index range (the optimizer's choice on a
		// tiny table is a scan).
		for chunk := range 4 {
			var b strings.Builder
			var args []any
			for i := range 500 {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString("(?, 'c', ?, 0, 1, 1, ?, 'USING')")
				args = append(args, fmt.Sprintf("%s-o%d", res, i%20), fmt.Sprintf("%s-bulk-%d-%d", res, chunk, i), int64(i))
			}
			if _, err := s.db.ExecContext(testCtx(t), `INSERT INTO quota_usage
				(resource_name, client_id, session_id, period_start_ms, granted_amount, charged_amount, start_ms, status)
				VALUES `+b.String(), args...); err != nil {
				t.Fatal(err)
			}
		}
		if s.dialect.name == "mysql" {
			if _, err := s.db.ExecContext(testCtx(t), `ANALYZE TABLE quota_usage`); err != nil {
				t.Fatal(err)
			}
		}
		usage, err := UsageSQL(quota.GroupByClient)
		if err != nil {
			t.Fatal(err)
		}
		byLine, err := UsageSQL(quota.GroupByLine)
		if err != nil {
			t.Fatal(err)
		}
		history := `SELECT id, ` + strings.Replace(strings.TrimPrefix(selectUsage, "SELECT "),
			"FROM quota_usage ", "FROM quota_usage"+s.dialect.historyIndex+" ", 1) +
			`WHERE resource_name = ? AND start_ms <= ? AND (start_ms < ? OR id < ?) ORDER BY start_ms DESC, id DESC LIMIT ?`
		for _, q := range []struct {
			name, sql string
			args      []any
			grouped   bool // a GROUP BY: its groups are sorted, the rows not
		}{
			{"usage", usage, []any{res, 0, int64(1) << 50, 1001}, true},
			{"usage by line", byLine, []any{res, 0, int64(1) << 50, 1001}, true},
			{"history", history, []any{res, int64(1) << 50, int64(1) << 50, 1 << 40, 100}, false},
		} {
			plan := explain(t, s, q.sql, q.args)
			t.Logf("%s plan on %s:\n%s", q.name, s.dialect.name, plan)
			if !strings.Contains(plan, "idx_quota_usage_start") {
				t.Errorf("%s: the plan does not use idx_quota_usage_start:\n%s", q.name, plan)
			}
			if !q.grouped && (strings.Contains(plan, "filesort") || strings.Contains(plan, "TEMP B-TREE")) {
				t.Errorf("%s: the plan sorts:\n%s", q.name, plan)
			}
			if q.grouped && !strings.Contains(plan, "Using index") && !strings.Contains(plan, "COVERING INDEX") {
				t.Errorf("%s: the plan reads table rows:\n%s", q.name, plan)
			}
		}
	})
}

// explain returns the query plan as text: MySQL's EXPLAIN rows (key and
// Extra) or SQLite's EXPLAIN QUERY PLAN details.
func explain(t *testing.T, s *Store, query string, args []any) string {
	t.Helper()
	prefix := "EXPLAIN "
	if s.dialect.name == "sqlite" {
		prefix = "EXPLAIN QUERY PLAN "
	}
	rows, err := s.db.QueryxContext(testCtx(t), prefix+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		m := map[string]any{}
		if err := rows.MapScan(m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"table", "type", "key", "rows", "Extra", "detail"} {
			if v, ok := m[k]; ok && v != nil {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&b, "%s=%v ", k, v)
			}
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestResetPeriodAndDeletePolicy(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		res := fmt.Sprintf("reset-%d", time.Now().UnixNano())
		p := quota.Policy{ResourceName: res, QuotaType: quota.TypeTokens, TotalLimit: 100, Timezone: "UTC",
			LeakThresholdSeconds: 60, CreatedAt: period, UpdatedAt: period}
		if _, _, err := s.PutPolicy(testCtx(t), p); err != nil {
			t.Fatal(err)
		}
		at := period.Add(36*time.Hour + 123*time.Millisecond)
		got, err := s.ResetPeriod(testCtx(t), res, at)
		if err != nil {
			t.Fatal(err)
		}
		if !got.ResetAt.Equal(at) || !got.PeriodAnchor().Equal(at) || !got.CreatedAt.Equal(period) {
			t.Fatalf("after reset: %+v", got)
		}
		// A PUT keeps the anchor, like createdAt.
		p.TotalLimit = 200
		if _, _, err := s.PutPolicy(testCtx(t), p); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetPolicy(testCtx(t), res); !got.ResetAt.Equal(at) || got.TotalLimit != 200 {
			t.Fatalf("after PUT: %+v", got)
		}
		if _, err := s.ResetPeriod(testCtx(t), res+"-none", at); !errors.Is(err, quota.ErrResourceNotFound) {
			t.Fatalf("reset of an unknown policy: %v", err)
		}
		if err := s.DeletePolicy(testCtx(t), res); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetPolicy(testCtx(t), res); !errors.Is(err, quota.ErrResourceNotFound) {
			t.Fatalf("after delete: %v", err)
		}
		if err := s.DeletePolicy(testCtx(t), res); !errors.Is(err, quota.ErrResourceNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}
