package config

import (
	"strings"
	"testing"
)

// Production (both backends set) with no API keys is refused unless
// --insecure-open-quota says the open client endpoints are meant; dev mode
// needs no flag; the flag and keys together are a contradiction.
func TestOpenQuotaMustBeExplicitInProduction(t *testing.T) {
	prod := []string{"--redis-addr", "127.0.0.1:6379", "--mysql-dsn", "u@tcp(h:3306)/db"}
	keys := []string{"--api-keys", key1 + "=svc:*"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // "" = accepted
	}{
		{"production without keys is refused", prod, nil, "QC_INSECURE_OPEN_QUOTA=true"},
		{"production without keys, flag set", append(prod, "--insecure-open-quota"), nil, ""},
		{"production without keys, variable set", prod, map[string]string{"QC_INSECURE_OPEN_QUOTA": "true"}, ""},
		{"production without keys, variable false", prod, map[string]string{"QC_INSECURE_OPEN_QUOTA": "false"}, "QC_API_KEYS is empty"},
		{"production with keys", append(prod, keys...), nil, ""},
		{"keys and the flag contradict", append(append(prod, keys...), "--insecure-open-quota"), nil, "contradicts QC_API_KEYS"},
		{"dev mode without keys", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, _, err := Load("serve", tt.args)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Load error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	// migrate needs no client auth.
	if _, _, err := Load("migrate", []string{"--mysql-dsn", "u@tcp(h:3306)/db"}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}
