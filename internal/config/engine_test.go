package config

import (
	"strings"
	"testing"
)

// TestHTTPEngineDefaultOverrideAndRefusal: fasthttp by default, net/http
// by flag or QC_HTTP_ENGINE, anything else refused naming the setting.
func TestHTTPEngineDefaultOverrideAndRefusal(t *testing.T) {
	c, _, err := Load("serve", nil)
	if err != nil || c.HTTP.Engine != "fasthttp" {
		t.Fatalf("default engine %q (%v), want fasthttp", c.HTTP.Engine, err)
	}
	if c, _, err = Load("serve", []string{"--http-engine", "net/http"}); err != nil || c.HTTP.Engine != "net/http" {
		t.Fatalf("--http-engine net/http: %q (%v)", c.HTTP.Engine, err)
	}
	t.Setenv("QC_HTTP_ENGINE", "net/http")
	if c, _, err = Load("serve", nil); err != nil || c.HTTP.Engine != "net/http" {
		t.Fatalf("QC_HTTP_ENGINE=net/http: %q (%v)", c.HTTP.Engine, err)
	}
	if _, _, err := Load("serve", []string{"--http-engine", ""}); err == nil || !strings.Contains(err.Error(), "http-engine") {
		t.Errorf("--http-engine '': err = %v, want one naming http-engine", err)
	}
	for _, bad := range []string{"nginx", "FASTHTTP", "net/http2"} {
		t.Setenv("QC_HTTP_ENGINE", bad)
		if _, _, err := Load("serve", nil); err == nil || !strings.Contains(err.Error(), "http-engine") {
			t.Errorf("QC_HTTP_ENGINE=%q: err = %v, want one naming http-engine", bad, err)
		}
	}
}
