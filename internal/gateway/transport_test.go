package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
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
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/quotacenter/quota-center/internal/testenv"
)

// grpc.health.v1 answers SERVING for the server and the rate limit
// service; reflection lists the service; the gateway's series are on
// /metrics with bounded labels.
func TestHealthReflectionAndMetrics(t *testing.T) {
	g, r := startOne(t, testenv.Dev, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(g.conn)
	for _, svc := range []string{"", rls.RateLimitService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(g.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), rls.RateLimitService_ServiceDesc.ServiceName) {
		t.Fatalf("reflection lists %v", names)
	}
	g.must(t, "d", desc(1, "k", "v"))
	g.must(t, "d", desc(1, "k", "v"))
	_, _ = g.ask(t, "", "nope", desc(1, "k", "v"))
	resp, err := http.Get(g.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`qc_gateway_requests_total{domain="d",result="ok"} 1`,
		`qc_gateway_requests_total{domain="d",result="over_limit"} 1`,
		`qc_gateway_requests_total{domain="unknown",result="error"} 1`,
		`qc_gateway_descriptors_total{domain="d",resource="` + r + `",result="over_limit"} 1`,
		`qc_gateway_hits_charged_total{domain="d",resource="` + r + `"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// With QC_GRPC_TLS_* set and a client CA, the listener is mTLS: a client
// without a certificate of that CA is refused, one with it is answered.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "qc-test-ca", true)
	srv, srvKey := newCert(t, ca, caKey, "127.0.0.1", false)
	cli, cliKey := newCert(t, ca, caKey, "envoy", false)
	write := func(name string, blocks ...*pem.Block) string {
		p := filepath.Join(dir, name)
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.pem", certBlock(ca))
	g, _ := startOne(t, testenv.Dev, 10, "",
		"--grpc-tls-cert", write("srv.pem", certBlock(srv)), "--grpc-tls-key", write("srv.key", keyBlock(t, srvKey)),
		"--grpc-tls-client-ca", caFile)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	dial := func(certs []tls.Certificate) error {
		conn, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "d", Descriptors: descs(desc(1, "k", "v"))})
		return err
	}
	if err := dial(nil); err == nil {
		t.Fatal("a client without a certificate was answered")
	}
	pair := tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey}
	if err := dial([]tls.Certificate{pair}); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
}

func descs(d ...*rlcommon.RateLimitDescriptor) []*rlcommon.RateLimitDescriptor { return d }

func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(cn); ip != nil {
		tpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func certBlock(c *x509.Certificate) *pem.Block { return &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw} }

func keyBlock(t *testing.T, k *ecdsa.PrivateKey) *pem.Block {
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return &pem.Block{Type: "EC PRIVATE KEY", Bytes: b}
}
