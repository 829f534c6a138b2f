package config

import (
	"strings"
	"testing"
)

// The gRPC listener is off by default; its settings are refused without
// it, and it needs a mapping file and a complete TLS pair.
func TestGRPCSettings(t *testing.T) {
	c, _, err := Load("serve", nil)
	if err != nil || c.GRPC.Addr != "" {
		t.Fatalf("default: %+v %v", c.GRPC, err)
	}
	c, _, err = Load("serve", []string{"--grpc-addr", "127.0.0.1:18081", "--gateway-config", "gw.yaml"})
	if err != nil || c.GRPC.Addr != "127.0.0.1:18081" || c.GRPC.GatewayConfig != "gw.yaml" {
		t.Fatalf("set: %+v %v", c.GRPC, err)
	}
	for args, want := range map[string]string{
		"--grpc-addr 127.0.0.1:18081":                               "gateway-config (QC_GATEWAY_CONFIG) is not",
		"--gateway-config gw.yaml":                                  "need grpc-addr",
		"--grpc-addr nope --gateway-config gw.yaml":                 `grpc-addr "nope"`,
		"--grpc-addr :1 --gateway-config g --grpc-tls-cert c":       "set both grpc-tls-cert and grpc-tls-key",
		"--grpc-addr :1 --gateway-config g --grpc-tls-client-ca ca": "grpc-tls-client-ca needs",
	} {
		_, _, err := Load("serve", strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
