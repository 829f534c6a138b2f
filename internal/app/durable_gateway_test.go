package app_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jmoiron/sqlx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// TestAnsweredGatewayChargeIsDurableAndSurvivesAKill holds the gateway's
// ShouldRateLimit to "OK only once the charge is in the ledger", with the
// group commit merging the rows of concurrent requests (one row per
// client, resource and period of a statement, internal/mysqlstore
// charges.go): quota-center runs as a separate process on the real Redis
// and MariaDB while 24 clients ask as fast as they can, one hit each; after
// each OK the ledger's sum for the resource, read on another connection,
// is at least the number of OKs counted before the read. quota-center is
// killed with SIGKILL in the middle of the load: afterwards the sum is at
// least every OK answered, and at most that plus the calls in flight at
// the kill (one per client), so nothing answered is lost and nothing is
// counted twice.
func TestAnsweredGatewayChargeIsDurableAndSurvivesAKill(t *testing.T) {
	dsn := testenv.MustMySQL(t)
	dir := t.TempDir()
	resource := testenv.Resource(t)
	mapping := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(mapping, []byte("domains:\n  - domain: d\n    descriptors:\n      - {key: k, value: v, resource: "+resource+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := l.Addr().String()
	_ = l.Close()
	token := "durable-admin-" + testenv.RandomSuffix() + testenv.RandomSuffix()
	args := append([]string{"--http-addr", "127.0.0.1:0", "--log-level", "warn", "--admin-tokens", "durable:" + token,
		"--grpc-addr", grpcAddr, "--gateway-config", mapping, "--mysql-dsn", dsn, "--migrate-on-start", "--insecure-open-quota"},
		testenv.RedisArgs(t, testenv.Real)...)
	ledger, err := sqlx.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })

	url, cmd, exited := startChild(t, dir, args)
	req, _ := http.NewRequest(http.MethodPut, url+"/admin/policies/"+resource,
		strings.NewReader(`{"quotaType":"COUNT","totalLimit":1000000000,"resetCron":"@daily"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated) {
		t.Fatalf("put policy: %v %v", resp, err)
	}
	_ = resp.Body.Close()

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := rls.NewRateLimitServiceClient(conn)
	ask := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err == nil && r.GetOverallCode() == rls.RateLimitResponse_OK
	}
	sum := func() (int64, error) {
		var n int64
		err := ledger.QueryRow(`SELECT COALESCE(SUM(charged_amount), 0) FROM quota_usage
			WHERE resource_name = ? AND status = 'FINISHED'`, resource).Scan(&n)
		return n, err
	}
	testenv.Eventually(t, 30*time.Second, "the gateway to answer OK", ask)

	const workers, killAfter = 24, 1500
	var (
		answered atomic.Int64 // OKs, the readiness probe's included
		behind   atomic.Int64 // reads that saw less than the OKs counted before them
		killOnce sync.Once
		killed   = make(chan struct{})
		wg       sync.WaitGroup
	)
	answered.Store(1)
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-killed:
					return
				default:
				}
				if !ask() {
					continue // in flight at the kill: no answer to hold it to
				}
				n := answered.Add(1)
				if got, err := sum(); err != nil {
					t.Errorf("read the ledger: %v", err)
					return
				} else if got < n {
					behind.Add(1)
				}
				if n >= killAfter {
					killOnce.Do(func() {
						_ = cmd.Process.Signal(syscall.SIGKILL)
						<-exited
						close(killed)
					})
				}
			}
		})
	}
	wg.Wait()
	if b := behind.Load(); b > 0 {
		t.Fatalf("%d OK answers came before the ledger held the charges answered so far", b)
	}
	got, err := sum()
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	if err := ledger.QueryRow(`SELECT COUNT(*) FROM quota_usage WHERE resource_name = ?`, resource).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	n := answered.Load()
	if got < n || got > n+workers {
		t.Fatalf("after SIGKILL the ledger charged %d for %d OK answers; want %d … %d (OKs plus at most one call in flight per client)",
			got, n, n, n+workers)
	}
	if n < killAfter {
		t.Fatalf("only %d OK answers before the kill, want at least %d", n, killAfter)
	}
	t.Logf("%d OK answers, %d charged in %d ledger rows; each OK was in the ledger when answered and all survived SIGKILL", n, got, rows)
}
