package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// gw is a running quota-center with its gRPC listener and a client built
// from go-control-plane's generated stubs.
type gw struct {
	*testenv.Server
	rls  rls.RateLimitServiceClient
	conn *grpc.ClientConn
	addr string
	key  string // X-API-Key of the HTTP calls, when keys are on
}

// freeAddr is a loopback address with a port free a moment ago.
//
// The port is drawn below Linux's ephemeral range (32768-60999 by
// default), not asked of the kernel with :0: a port of that range, closed
// here and bound again by the server a moment later, could meanwhile be
// taken as the local port of any outgoing connection of the tests running
// alongside (TestMutualTLS failed so: "bind: address already in use").
// Nothing on this machine takes ports of 21000-31999 by itself.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 21000+rand.IntN(11000)))
		if err != nil {
			continue // in use: draw again
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr
	}
	t.Fatal("no free port in 127.0.0.1:21000-31999 after 100 draws")
	return ""
}

// startGW writes the mapping file and starts quota-center in mode with it.
func startGW(t *testing.T, mode testenv.Mode, mapping string, extra ...string) *gw {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(mapping), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	s := testenv.Start(t, mode, append([]string{"--grpc-addr", addr, "--gateway-config", path}, extra...)...)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &gw{Server: s, rls: rls.NewRateLimitServiceClient(conn), conn: conn, addr: addr}
}

// startOne starts quota-center with one mapping, domain d, descriptor
// k=v, to a new resource of limit tokens a day; opts are more fields of
// the descriptor ("shadow_mode: true").
func startOne(t *testing.T, mode testenv.Mode, limit int64, opts string, extra ...string) (*gw, string) {
	t.Helper()
	r := testenv.Resource(t)
	if opts != "" {
		opts = ", " + opts
	}
	g := startGW(t, mode, fmt.Sprintf("domains:\n  - domain: d\n    descriptors:\n      - {key: k, value: v, resource: %s%s}\n", r, opts), extra...)
	g.policy(t, r, limit, nil)
	return g, r
}

// forModes runs fn on dev mode and on the real Redis + MariaDB.
func forModes(t *testing.T, fn func(t *testing.T, mode testenv.Mode)) {
	for _, m := range []testenv.Mode{testenv.Dev, testenv.Real} {
		t.Run(string(m), func(t *testing.T) { fn(t, m) })
	}
}

// desc builds a descriptor of key=value pairs; hits < 0 leaves hits_addend unset.
func desc(hits int64, kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits >= 0 {
		d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	}
	return d
}

func (g *gw) ask(t *testing.T, key string, domain string, ds ...*rlcommon.RateLimitDescriptor) (*rls.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	}
	return g.rls.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: domain, Descriptors: ds})
}

// must asks and fails the test on an error status.
func (g *gw) must(t *testing.T, domain string, ds ...*rlcommon.RateLimitDescriptor) *rls.RateLimitResponse {
	t.Helper()
	resp, err := g.ask(t, "", domain, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// httpCall sends a JSON request to the HTTP API.
func (g *gw) httpCall(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if g.key != "" && strings.HasPrefix(path, "/quota/") {
		req.Header.Set("X-API-Key", g.key)
	}
	if g.AdminToken != "" && strings.HasPrefix(path, "/admin/") {
		req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	_ = dec.Decode(&out)
	return resp.StatusCode, out
}

// policy creates a policy through the admin API (its limit may fail to go
// live when Redis is cut: the policy is stored all the same).
func (g *gw) policy(t *testing.T, name string, limit int64, extra map[string]any) {
	t.Helper()
	body := map[string]any{"quotaType": "TOKENS", "totalLimit": limit, "resetCron": "@daily"}
	for k, v := range extra {
		body[k] = v
	}
	code, out := g.httpCall(t, http.MethodPut, "/admin/policies/"+name, body)
	if code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("put policy %s: %d %v", name, code, out)
	}
}

// used is the resource's charged total and remaining per GET /quota/status.
func (g *gw) used(t *testing.T, name string) (used, remaining int64) {
	t.Helper()
	code, out := g.httpCall(t, http.MethodGet, "/quota/status?resourceName="+name, nil)
	if code != http.StatusOK {
		t.Fatalf("status %s: %d %v", name, code, out)
	}
	u, _ := out["usedAmount"].(json.Number).Int64()
	r, _ := out["remainingQuota"].(json.Number).Int64()
	return u, r
}

// ledgerCharged sums the resource's finished rows in the ledger.
func (g *gw) ledgerCharged(t *testing.T, name string) (charged, rows int64) {
	t.Helper()
	err := g.Ledger.QueryRow(`SELECT COALESCE(SUM(charged_amount), 0), COUNT(*) FROM quota_usage
		WHERE resource_name = ? AND status = 'FINISHED'`, name).Scan(&charged, &rows)
	if err != nil {
		t.Fatal(err)
	}
	return charged, rows
}

func codesOf(resp *rls.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.GetOverallCode().String())
	for _, s := range resp.GetStatuses() {
		fmt.Fprintf(&b, " %s", s.GetCode())
	}
	return b.String()
}
