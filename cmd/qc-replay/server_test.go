package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// sharedTrace is the real trace beside the repository (../shared from the
// repo root), read in place.
func sharedTrace(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "data", "azure-llm-trace-2023", "AzureLLMInferenceTrace_code.csv"))
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the shared trace is missing in CI: %v", err)
		}
		t.Skipf("shared trace not found (%v)", err)
	}
	return p
}

// TestReplayFirst500TraceRowsAgainstTheRealService replays the first 500
// rows of the real trace through the real service (dev mode and the real
// Redis + MariaDB) with a limit below their total, and checks the service's
// usage against what the replay was charged and against the ledger.
func TestReplayFirst500TraceRowsAgainstTheRealService(t *testing.T) {
	trace := sharedTrace(t)
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.Start(t, mode)
			res := testenv.Resource(t)
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{
				"--url", srv.URL, "--trace", trace, "--rows", "500", "--resource", res,
				"--limit", "600000", "--concurrency", "16", "--admin-token", srv.AdminToken,
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
