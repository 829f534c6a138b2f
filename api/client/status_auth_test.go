package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Status authenticates with the API key when the client has one, else with
// the admin token (GET /quota/status takes either): an operator's client,
// such as `quota-center admin status`, has only the token (issue 22 §3).
// Every other call keeps its own credential.
func TestStatusSendsTheAPIKeyElseTheAdminToken(t *testing.T) {
	var key, bearer string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, bearer = r.Header.Get("X-API-Key"), r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"resourceName":"r"}`))
	}))
	defer srv.Close()
	tests := []struct {
		name             string
		opts             []Option
		wantKey, wantAut string
	}{
		{"admin token only", []Option{WithAdminToken("tok")}, "", "Bearer tok"},
		{"API key only", []Option{WithAPIKey("key")}, "key", ""},
		{"both: the API key", []Option{WithAPIKey("key"), WithAdminToken("tok")}, "key", ""},
		{"neither", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(srv.URL, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Status(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
			if key != tt.wantKey || bearer != tt.wantAut {
				t.Errorf("X-API-Key %q, Authorization %q; want %q, %q", key, bearer, tt.wantKey, tt.wantAut)
			}
		})
	}
}
