package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// rawGet returns the body of an admin GET, failing on another status than
// 200.
func rawGet(t *testing.T, s *testenv.Server, path string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return string(body)
}

// TestUsageAnswersTheSameAfterRollupAndDeletion holds GET /admin/usage's
// JSON, in every grouping, to the same bytes before the ledger's lifecycle
// ran and after it rolled the rows up and deleted them (MariaDB; the same
// on SQLite is held by internal/mysqlstore's and internal/lifecycle's
// tests).
func TestUsageAnswersTheSameAfterRollupAndDeletion(t *testing.T) {
	dsn := testenv.MustMySQL(t)
	s := testenv.Start(t, testenv.Real, "--mysql-dsn", dsn)
	res := testenv.Resource(t)
	putPolicy(t, s, res, map[string]any{"quotaType": "TOKENS", "totalLimit": 100000, "resetCron": "0 0 * * *"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := mysqlstore.Open(ctx, dsn, mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -20)
	for i := range 300 {
		start := day.Add(time.Duration(i) * 17 * time.Minute)
		status := []string{"FINISHED", "LEAKED", "CANCELLED"}[i%3]
		if _, err := st.DB().ExecContext(ctx, `INSERT INTO quota_usage (resource_name, client_id, session_id,
			period_start_ms, granted_amount, charged_amount, refunded_amount, start_ms, end_ms, status, business_line)
			VALUES (?, ?, ?, ?, 10, ?, ?, ?, ?, ?, ?)`, res, fmt.Sprintf("c%d", i%4), fmt.Sprintf("%s-%d", res, i),
			start.Truncate(24*time.Hour).UnixMilli(), i%3*4, 10-i%3*4, start.UnixMilli(), start.Add(time.Minute).UnixMilli(),
			status, []string{"", "ads"}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	from, to := day.Format(time.RFC3339), day.AddDate(0, 0, 4).Format(time.RFC3339)
	var paths []string
	for _, g := range []string{"client", "line", "hour", "day"} {
		paths = append(paths, fmt.Sprintf("/admin/usage?resourceName=%s&groupBy=%s&from=%s&to=%s", res, g, from, to))
	}
	before := map[string]string{}
	for _, p := range paths {
		before[p] = rawGet(t, s, p)
	}
	cfg := lifecycle.Defaults()
	cfg.Retention, cfg.Batch, cfg.DeleteBatch, cfg.Pause = 10*24*time.Hour, 64, 50, 0
	reps, err := lifecycle.New(cfg, st, st, &period.Scheduler{}, zap.NewNop(), nil).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r lifecycle.Report
	for _, rep := range reps {
		if rep.Resource == res {
			r = rep
		}
	}
	if r.RowsRolled != 300 || r.RowsDeleted != 300 || r.Blocked || r.Error != "" {
		t.Fatalf("report %+v; want 300 rows rolled up and deleted", r)
	}
	for _, p := range paths {
		if got := rawGet(t, s, p); got != before[p] {
			t.Errorf("GET %s changed:\n got %s\nwant %s", p, got, before[p])
		}
	}
}
