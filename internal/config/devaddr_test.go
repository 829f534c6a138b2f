package config

import (
	"os"
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
		{"dev mode, flag", "", []string{"--http-addr", ":9090"}, ":9090"},
		{"dev mode, QC_HTTP_ADDR", "0.0.0.0:8081", nil, "0.0.0.0:8081"},
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
