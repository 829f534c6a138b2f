package config

import (
	"strings"
	"testing"
	"time"
)

// TestLineCloseBound: QC_LINE_CLOSE_BOUND (a line DELETE's closing mark's
// lifetime) defaults to 30 s, is read from its flag, and outside 1s … 10m
// is a configuration error naming it.
func TestLineCloseBound(t *testing.T) {
	if got := Default().Quota.LineCloseBound; got != 30*time.Second {
		t.Fatalf("default %s, want 30s", got)
	}
	tests := []struct {
		give    string
		want    time.Duration
		wantErr bool
	}{
		{give: "5s", want: 5 * time.Second},
		{give: "10m", want: 10 * time.Minute},
		{give: "500ms", wantErr: true},
		{give: "0s", wantErr: true},
		{give: "11m", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			c, _, err := Load("serve", []string{"-line-close-bound", tt.give})
			if err == nil {
				err = c.Validate()
			}
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "line-close-bound") {
					t.Fatalf("error %v, want one naming line-close-bound", err)
				}
				return
			}
			if err != nil || c.Quota.LineCloseBound != tt.want {
				t.Fatalf("got %s, %v; want %s", c.Quota.LineCloseBound, err, tt.want)
			}
		})
	}
}
