package admincli_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

// An unknown command is an error (a non-zero exit), not the help text with
// exit status 0: a typo in a script must not pass silently. Bare `admin`
// and `admin policies` still print their help (flag.ErrHelp).
func TestUnknownCommandIsAnError(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"policies", "bogus"}, {"policies", "lsit", "x"}} {
		_, err := cli(t, append(args, "--url", "http://127.0.0.1:1")...)
		if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("admin %v: error %v, want an unknown command error", args, err)
		}
	}
	for _, args := range [][]string{{}, {"policies"}} {
		if _, err := cli(t, args...); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("admin %v: %v, want flag.ErrHelp", args, err)
		}
	}
}

// A `--limit` below 1 is refused before any call, instead of being
// read as "not given" (0 and negatives used to list 100 entries).
func TestLimitOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		args []string
		bad  []string
	}{
		{[]string{"audit"}, []string{"0", "-5", "x"}},
		{[]string{"sessions", "r"}, []string{"0", "-1"}},
	} {
		for _, l := range tc.bad {
			_, err := cli(t, append(tc.args, "--limit", l, "--url", "http://127.0.0.1:1")...)
			if err == nil || !strings.Contains(err.Error(), "-limit") || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("%v --limit %s: error %v, want a flag error naming -limit (and no call)", tc.args, l, err)
			}
		}
	}
}
