package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestLocalBatchReplayAgainstTheRealService replays the first 500 rows of
// the real trace through a LocalPool (--local-batch) on the real service,
// with a limit below their total: the usedAmount check must pass, the
// ledger must agree, and far fewer central calls than rows are made.
func TestLocalBatchReplayAgainstTheRealService(t *testing.T) {
	trace := sharedTrace(t)
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.Start(t, mode)
			res := testenv.Resource(t)
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{
				"--url", srv.URL, "--trace", trace, "--rows", "500", "--resource", res, "--limit", "600000",
				"--concurrency", "16", "--admin-token", srv.AdminToken, "--local-batch", "20000", "--local-batch-max", "50000",
			}, &out, &errOut)
			if err != nil {
				t.Fatalf("replay failed: %v\n%s\n%s", err, out.String(), errOut.String())
			}
			text := out.String()
			if !strings.Contains(text, "check: OK") {
				t.Fatalf("no check: OK in\n%s", text)
			}
			granted, refused := field(t, text, "granted"), field(t, text, "refused (429)")
			if granted+refused != 500 || refused == 0 || granted == 0 {
				t.Fatalf("granted %d + refused %d, want 500 with both > 0\n%s", granted, refused, text)
			}
			if calls := field(t, text, "central calls"); calls >= granted {
				t.Fatalf("%d central calls for %d granted rows: the pool did not batch\n%s", calls, granted, text)
			}
			charged := field(t, text, "tokens charged")
			var ledger int64
			if err := srv.Ledger.QueryRow(
				"SELECT COALESCE(SUM(charged_amount),0) FROM quota_usage WHERE resource_name = ? AND status = 'FINISHED'", res,
			).Scan(&ledger); err != nil {
				t.Fatal(err)
			}
			if ledger != charged || charged > 600000 {
				t.Fatalf("ledger charged %d, replay charged %d (limit 600000)", ledger, charged)
			}
		})
	}
}

func TestLocalBatchFlagsAreChecked(t *testing.T) {
	for _, args := range [][]string{{"--local-batch", "-1"}, {"--local-batch", "100", "--local-batch-max", "50"}} {
		var errOut bytes.Buffer
		_, err := parseFlags(args, &errOut)
		if _, ok := err.(*usageError); !ok {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
