package admincli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// `admin finish` shows its amounts like every other table
// (docs/operators.md): a DURATION resource's seconds as h:mm:ss, and -o
// json the API's numbers and the quotaType they are in.
func TestFinishShowsDurationsAsClock(t *testing.T) {
	s := testenv.Start(t, testenv.Dev, "--admin-tokens", "cli:"+token)
	t.Setenv("QC_URL", s.URL)
	t.Setenv("QC_ADMIN_TOKEN", token)
	res := testenv.Resource(t)
	c, err := client.New(s.URL, client.WithAdminToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.PutPolicy(ctx, client.PolicySpec{ResourceName: res, QuotaType: "DURATION", TotalLimit: 18000}); err != nil {
		t.Fatal(err)
	}
	ap, err := c.Apply(ctx, client.ApplyRequest{ResourceName: res, ApplyAmount: 3600, ClientID: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	rows := columns(t, mustCLI(t, "finish", ap.SessionID, "--client", "svc", "--amount", "4000", "--reason", "stuck"))
	want := []string{ap.SessionID, res, "svc", "1:00:00", "1:06:40", "0:00:00", "0:06:40", "3:53:20"}
	if len(rows) != 2 || len(rows[1]) != len(want) {
		t.Fatalf("finish: %q, want %q", rows, want)
	}
	for i := range want {
		if rows[1][i] != want[i] {
			t.Fatalf("finish: %q, want %q", rows[1], want)
		}
	}
	ap, err = c.Apply(ctx, client.ApplyRequest{ResourceName: res, ApplyAmount: 600, ClientID: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	var got client.ForceFinishResult
	if err := json.Unmarshal([]byte(mustCLI(t, "finish", ap.SessionID, "--client", "svc", "-o", "json")), &got); err != nil ||
		got.QuotaType != "DURATION" || got.GrantedAmount != 600 || got.ChargedAmount != 600 {
		t.Fatalf("finish -o json: %+v, %v; want DURATION, 600 granted and charged", got, err)
	}
}
