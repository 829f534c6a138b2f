package admincli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// `admin status` works against a production server, where /quota/* takes
// API keys and /admin/* admin tokens: the CLI has only the admin token and
// reads the status with it (issue 22 §3: it sent no credential and got
// 401). Applies made with a client key show in the status it prints.
func TestStatusWithAdminTokenOnAProductionServer(t *testing.T) {
	const apiKey = "cli-status-api-key-0123456789"
	s := testenv.Start(t, testenv.Real, "--admin-tokens", "cli:"+token, "--api-keys", apiKey+"=svc:*")
	t.Setenv("QC_URL", s.URL)
	t.Setenv("QC_ADMIN_TOKEN", token)
	res := testenv.Resource(t)
	mustCLI(t, "policies", "set", res, "--type", "TOKENS", "--limit", "1000")
	keyed, err := client.New(s.URL, client.WithAPIKey(apiKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyed.Apply(context.Background(), client.ApplyRequest{ResourceName: res, ApplyAmount: 300}); err != nil {
		t.Fatal(err)
	}

	var st []client.QuotaStatus
	if err := json.Unmarshal([]byte(mustCLI(t, "status", res, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].ResourceName != res || st[0].TotalLimit != 1000 || st[0].ReservedAmount != 300 || st[0].RemainingQuota != 700 {
		t.Fatalf("status: %+v", st)
	}
	rows := columns(t, mustCLI(t, "status", res))
	if rows[1][0] != res || rows[1][3] != "300 tokens" {
		t.Fatalf("status table: %q", rows)
	}

	// A wrong token is still refused, and said so.
	if _, err := cli(t, "status", res, "--token", "wrong-token-0123456789"); err == nil || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
		t.Fatalf("status with a wrong token: %v, want UNAUTHENTICATED", err)
	}
}
