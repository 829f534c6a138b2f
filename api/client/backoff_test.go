package client

import (
	"testing"
	"time"
)

// The wait before a retry is full jitter: uniform in [0, min(max,
// base·2^try)], so it is never above the ceiling and, over many draws,
// spreads over the whole range rather than sitting at one value.
func TestBackoffIsFullJitterUnderTheCeiling(t *testing.T) {
	base, ceilMax := 100*time.Millisecond, 2*time.Second
	for try := range 8 {
		ceil := min(ceilMax, base<<try)
		lo, hi := ceil, time.Duration(0)
		for range 2000 {
			d := backoff(base, ceilMax, try)
			if d < 0 || d > ceil {
				t.Fatalf("try %d: wait %v outside [0, %v]", try, d, ceil)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > ceil/10 || hi < ceil*9/10 {
			t.Errorf("try %d: 2000 waits within [%v, %v], want them spread over [0, %v]", try, lo, hi, ceil)
		}
	}
}
