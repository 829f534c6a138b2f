package admincli_test

import (
	"strings"
	"testing"
)

// TestLinesSetRefusesZeroAmounts: "lines set … --weight 0" (or
// --dedicated 0, or below) is refused by the CLI before it calls the
// server. It used to create the line with weight 1: the client leaves a 0
// out of the request and the server takes a line with neither for weight
// 1. The server here is unreachable, so any call would fail otherwise.
func TestLinesSetRefusesZeroAmounts(t *testing.T) {
	t.Setenv("QC_URL", "http://127.0.0.1:1")
	t.Setenv("QC_ADMIN_TOKEN", token)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--weight", "0"}, "--weight must be 1"},
		{[]string{"--weight", "-2"}, "--weight must be 1"},
		{[]string{"--dedicated", "0"}, "--dedicated must be at least 1"},
		{[]string{"--weight", "0", "--dedicated", "0"}, "not both"},
		{[]string{"--weight", "2", "--dedicated", "5"}, "not both"},
	} {
		args := append([]string{"lines", "set", "llm", "search", "--tier", "CORE"}, tc.args...)
		_, err := cli(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("admin %v: %v, want an error with %q", args, err, tc.want)
		}
	}
}
