package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quotacenter/quota-center/internal/faults"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Issue 22 §11: the gateway read the policies from MySQL at start (to count
// each capped mapping's resources), and quota-center exited when MySQL did
// not answer. With MySQL unreachable at start it now starts, answers
// UNAVAILABLE, and once MySQL answers it serves without a restart,
// counting the resources made before it started against the cap.
func TestGatewayStartsWhileMySQLIsDown(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustMySQL(t)
	fixed, tpl, sfx := testenv.Resource(t), testenv.Resource(t), testenv.RandomSuffix()
	existing := "t-a-" + sfx
	ms, err := mysqlstore.Open(ctx, dsn, mysqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, name := range []string{fixed, tpl, existing} {
		p := quota.Policy{ResourceName: name, QuotaType: quota.TypeTokens, TotalLimit: 5, ResetCron: "@daily", Timezone: "UTC",
			LeakThresholdSeconds: 300, FailMode: quota.FailClosed, CreatedAt: now, UpdatedAt: now}
		if _, _, err := ms.PutPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	_ = ms.Close()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.StartProxy(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg.Addr = proxy.Addr()
	proxy.Suspend() // MySQL's port does not listen when quota-center starts

	g := startGW(t, testenv.Real, fmt.Sprintf(`
domains:
  - domain: d
    descriptors:
      - {key: k, value: v, resource: %s}
      - key: tenant
        resource: t-{value}-%s
        template: %s
        max_resources: 1
`, fixed, sfx, tpl), "--mysql-dsn", cfg.FormatDSN(), "--migrate-on-start=false", "--breaker-open-for", "200ms")
	for _, d := range [][]string{{"k", "v"}, {"tenant", "b"}} {
		if _, err := g.ask(t, "", "d", desc(1, d...)); status.Code(err) != codes.Unavailable {
			t.Fatalf("%v with MySQL down since the start: %v, want UNAVAILABLE", d, err)
		}
	}
	if err := proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the fixed resource charged once MySQL answers", func() bool {
		resp, err := g.ask(t, "", "d", desc(1, "k", "v"))
		if err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("fixed resource after MySQL returned: %v", err)
		}
		return err == nil && codesOf(resp) == "OK OK"
	})
	// t-a existed before the start: the cap of 1 is taken, counted by the
	// load made once MySQL answered.
	if resp := g.must(t, "d", desc(1, "tenant", "b")); codesOf(resp) != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("a new tenant past the cap after a start with MySQL down: %v", resp)
	}
	if resp := g.must(t, "d", desc(1, "tenant", "a")); codesOf(resp) != "OK OK" {
		t.Fatalf("the tenant made before the start: %v", resp)
	}
}
