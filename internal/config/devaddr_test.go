package config

import (
	"os"
	"strings"
	"testing"
)

// Dev mode's endpoints are open, so it listens on loopback unless told
// otherwise; production keeps :8080 (issue 10 §5).
func TestHTTPAddrDefaultsToLoopbackInDevModeOnly(t *testing.T) {
	for _, k := range []string{"QC_HTTP_ADDR", "QC_REDIS_ADDR", "QC_MYSQL_DSN"} {
		unsetenv(t, k)
	}
	prod := []string{"--redis-addr", "127.0.0.1:6379", "--mysql-dsn", "root@tcp(127.0.0.1:3306)/x", "--insecure-open-quota"}
	tests := []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"dev mode, nothing set", "", nil, "127.0.0.1:8080"},
		{"dev mode, flag", "", []string{"--http-addr", "127.0.0.1:9090"}, "127.0.0.1:9090"},
		{"dev mode, QC_HTTP_ADDR", "[::1]:8081", nil, "[::1]:8081"},
		{"dev mode, QC_HTTP_ADDR on every interface, allowed", "0.0.0.0:8081", []string{"--dev-insecure-non-loopback"}, "0.0.0.0:8081"},
		{"production, nothing set", "", prod, ":8080"},
		{"production, QC_HTTP_ADDR", "127.0.0.1:7000", prod, "127.0.0.1:7000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("QC_HTTP_ADDR", tc.env)
			if tc.env == "" {
				unsetenv(t, "QC_HTTP_ADDR")
			}
			c, _, err := Load("serve", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if c.HTTP.Addr != tc.want {
				t.Errorf("http addr = %q, want %q", c.HTTP.Addr, tc.want)
			}
		})
	}
}

// unsetenv removes k for the test; t.Setenv first makes it restored after.
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "")
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}

// Dev mode refuses a listener that is not on loopback unless
// QC_DEV_INSECURE_NON_LOOPBACK says so: the image sets QC_HTTP_ADDR=:8080,
// and a container started without backends served dev mode's open
// endpoints on every interface (issue 22 §4). Production is not affected.
func TestDevModeRefusesANonLoopbackAddress(t *testing.T) {
	for _, k := range []string{"QC_HTTP_ADDR", "QC_GRPC_ADDR", "QC_PPROF_ADDR", "QC_REDIS_ADDR", "QC_MYSQL_DSN", "QC_DEV_INSECURE_NON_LOOPBACK"} {
		unsetenv(t, k)
	}
	gw := []string{"--gateway-config", "gateway.yaml"}
	prod := []string{"--redis-addr", "127.0.0.1:6379", "--mysql-dsn", "root@tcp(127.0.0.1:3306)/x", "--insecure-open-quota"}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		refused string // the flag named in the error; "" = accepted
	}{
		{name: "the image's QC_HTTP_ADDR=:8080", env: map[string]string{"QC_HTTP_ADDR": ":8080"}, refused: "http-addr"},
		{name: "0.0.0.0", args: []string{"--http-addr", "0.0.0.0:8080"}, refused: "http-addr"},
		{name: "[::]", args: []string{"--http-addr", "[::]:8080"}, refused: "http-addr"},
		{name: "a LAN address", args: []string{"--http-addr", "10.1.2.3:8080"}, refused: "http-addr"},
		{name: "a host name", args: []string{"--http-addr", "quota.example.com:8080"}, refused: "http-addr"},
		{name: "the gRPC listener on every interface", args: append([]string{"--grpc-addr", ":8081"}, gw...), refused: "grpc-addr"},
		{name: "pprof on every interface", args: []string{"--pprof-addr", "0.0.0.0:6060"}, refused: "pprof-addr"},
		{name: "pprof on loopback", args: []string{"--pprof-addr", "127.0.0.1:6060"}},
		{name: "127.0.0.1", args: []string{"--http-addr", "127.0.0.1:8080"}},
		{name: "127.0.0.2 (still loopback)", args: []string{"--http-addr", "127.0.0.2:8080"}},
		{name: "localhost", args: []string{"--http-addr", "localhost:8080"}},
		{name: "::1", args: []string{"--http-addr", "[::1]:8080"}},
		{name: "the gRPC listener on loopback", args: append([]string{"--grpc-addr", "127.0.0.1:8081"}, gw...)},
		{name: "allowed by the flag", args: []string{"--http-addr", ":8080", "--dev-insecure-non-loopback"}},
		{name: "allowed by QC_DEV_INSECURE_NON_LOOPBACK", env: map[string]string{"QC_HTTP_ADDR": ":8080", "QC_DEV_INSECURE_NON_LOOPBACK": "true"}},
		{name: "production on every interface", args: append([]string{"--http-addr", ":8080", "--grpc-addr", ":8081"}, append(gw, prod...)...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := Load("serve", tc.args)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) ||
				!strings.Contains(err.Error(), "QC_DEV_INSECURE_NON_LOOPBACK")):
				t.Fatalf("error %v, want one naming %s and QC_DEV_INSECURE_NON_LOOPBACK", err, tc.refused)
			}
		})
	}
}
