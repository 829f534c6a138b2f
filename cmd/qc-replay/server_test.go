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
	replay500AndCheck(t)
}

// replay500AndCheck runs qc-replay with extra flags on the first 500 rows
// of the real trace, on dev mode and the real backends, with a limit below
// their total: the check must pass, both granted and refused rows must
// occur, and the ledger must agree with what the replay was charged. It
// returns the outputs by mode.
func replay500AndCheck(t *testing.T, extra ...string) map[testenv.Mode]string {
	trace := sharedTrace(t)
	outs := map[testenv.Mode]string{}
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.Start(t, mode)
			res := testenv.Resource(t)
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{
				"--url", srv.URL, "--trace", trace, "--rows", "500", "--resource", res,
				"--limit", "600000", "--concurrency", "16", "--admin-token", srv.AdminToken,
			}, extra...), &out, &errOut)
			if err != nil {
				t.Fatalf("replay failed: %v\n%s\n%s", err, out.String(), errOut.String())
			}
			text := out.String()
			outs[mode] = text
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
	return outs
}
