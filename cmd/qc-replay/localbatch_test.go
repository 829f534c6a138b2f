package main

import (
	"bytes"
	"errors"
	"testing"
)

// TestLocalBatchReplayAgainstTheRealService replays the first 500 rows of
// the real trace through a LocalPool (--local-batch) on the real service,
// with a limit below their total: the usedAmount check must pass, the
// ledger must agree, and far fewer central calls than granted rows are
// made.
func TestLocalBatchReplayAgainstTheRealService(t *testing.T) {
	for mode, text := range replay500AndCheck(t, "--local-batch", "20000", "--local-batch-max", "50000") {
		if calls, granted := field(t, text, "central calls"), field(t, text, "granted"); calls >= granted {
			t.Errorf("%s: %d central calls for %d granted rows: the pool did not batch\n%s", mode, calls, granted, text)
		}
	}
}

func TestLocalBatchFlagsAreChecked(t *testing.T) {
	for _, args := range [][]string{{"--local-batch", "-1"}, {"--local-batch", "100", "--local-batch-max", "50"}} {
		var errOut bytes.Buffer
		_, err := parseFlags(args, &errOut)
		if ue := (*usageError)(nil); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
