package config

import (
	"flag"
	"fmt"
	"net"
)

// GRPC configures the gRPC listener serving Envoy's rate limit service
// protocol (internal/gateway). Off unless Addr is set.
type GRPC struct {
	// Addr is the listen address (QC_GRPC_ADDR), e.g. :8081; empty = off.
	Addr string
	// GatewayConfig is the mapping file (QC_GATEWAY_CONFIG): domains and
	// descriptors to resources (docs/gateway.md). Required with Addr.
	GatewayConfig string
	// TLSCert and TLSKey are PEM files (QC_GRPC_TLS_CERT, QC_GRPC_TLS_KEY);
	// TLSClientCA (QC_GRPC_TLS_CLIENT_CA) makes it mTLS: client
	// certificates signed by it are required. Empty = plaintext.
	TLSCert, TLSKey, TLSClientCA string
}

// grpcFlags registers the GRPC settings' flags.
func grpcFlags(fs *flag.FlagSet, g *GRPC) {
	fs.StringVar(&g.Addr, "grpc-addr", g.Addr, "gRPC listen address of the Envoy rate limit service (ShouldRateLimit, grpc.health.v1, reflection); empty = off")
	fs.StringVar(&g.GatewayConfig, "gateway-config", g.GatewayConfig, "gateway mapping file (YAML: domains and descriptors to resources); required with grpc-addr")
	fs.StringVar(&g.TLSCert, "grpc-tls-cert", g.TLSCert, "PEM certificate of the gRPC listener (with grpc-tls-key; empty = plaintext)")
	fs.StringVar(&g.TLSKey, "grpc-tls-key", g.TLSKey, "PEM private key of the gRPC listener")
	fs.StringVar(&g.TLSClientCA, "grpc-tls-client-ca", g.TLSClientCA, "PEM CA whose client certificates the gRPC listener requires (mTLS; empty = none asked)")
}

// validate checks the GRPC settings.
func (g GRPC) validate() []error {
	var errs []error
	if g.Addr == "" {
		if g.GatewayConfig != "" || g.TLSCert != "" || g.TLSKey != "" || g.TLSClientCA != "" {
			errs = append(errs, fmt.Errorf("gateway-config and grpc-tls-* need grpc-addr (QC_GRPC_ADDR) to be set"))
		}
		return errs
	}
	if _, _, err := net.SplitHostPort(g.Addr); err != nil {
		errs = append(errs, fmt.Errorf("grpc-addr %q: %w", g.Addr, err))
	}
	if g.GatewayConfig == "" {
		errs = append(errs, fmt.Errorf("grpc-addr is set but gateway-config (QC_GATEWAY_CONFIG) is not: name the mapping file"))
	}
	if (g.TLSCert == "") != (g.TLSKey == "") {
		errs = append(errs, fmt.Errorf("set both grpc-tls-cert and grpc-tls-key, or neither"))
	}
	if g.TLSClientCA != "" && g.TLSCert == "" {
		errs = append(errs, fmt.Errorf("grpc-tls-client-ca needs grpc-tls-cert and grpc-tls-key"))
	}
	return errs
}
