package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quotacenter/quota-center/internal/gateway"
)

// A domain not in the mapping is NOT_FOUND saying so, naming the domains
// there are, without the server's mapping-file path: that goes to the log.
func TestUnknownDomainIsNotFoundWithoutTheServersPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secret-etc")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.yaml")
	mapping := "domains:\n  - domain: d\n    descriptors:\n      - {key: k, value: v, resource: r}\n"
	if err := os.WriteFile(path, []byte(mapping), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	svc := gateway.NewService(gateway.Options{Config: cfg, Log: zap.New(core)})
	_, err = svc.ShouldRateLimit(context.Background(), &rls.RateLimitRequest{Domain: "nope", Descriptors: []*rlcommon.RateLimitDescriptor{desc(1, "k", "v")}})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.NotFound || !strings.Contains(msg, `domain "nope" is not configured`) || !strings.HasSuffix(msg, "(configured domains: d)") {
		t.Fatalf("unknown domain: %v; want NOT_FOUND saying the domain is not configured", err)
	}
	if strings.Contains(msg, "secret-etc") || strings.Contains(msg, "gateway.yaml") {
		t.Fatalf("the message shows the server's path: %q", msg)
	}
	entries := logs.FilterField(zap.String("config", path)).FilterField(zap.String("domain", "nope")).All()
	if len(entries) != 1 {
		t.Fatalf("log entries with the path and the domain: %d (all: %v); want 1", len(entries), logs.All())
	}
}
