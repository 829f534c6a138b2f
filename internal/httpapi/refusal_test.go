package httpapi

import (
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

// A watermark refusal tells a CORE caller that critical work passes, and a
// GROWTH or EXPLORE caller (whose critical work is refused as well) what
// does pass; no advice to "send critical work" where it would not help.
func TestLineAdviceFitsTheTier(t *testing.T) {
	if a := lineAdvice(quota.RefusedWatermark, "CORE", nil); !strings.Contains(a, "critical work still passes") {
		t.Errorf("CORE watermark: %q", a)
	}
	for _, tier := range []string{"GROWTH", "EXPLORE", "unknown"} {
		a := lineAdvice(quota.RefusedWatermark, tier, nil)
		if strings.Contains(a, "critical") || !strings.Contains(a, "continuations") || !strings.Contains(a, tier) {
			t.Errorf("%s watermark: %q", tier, a)
		}
	}
	for _, r := range []quota.RefusalReason{quota.RefusedLineExhausted, quota.RefusedPoolExhausted} {
		if a := lineAdvice(r, "EXPLORE", nil); a == "" || strings.Contains(a, "critical") {
			t.Errorf("%s: %q", r, a)
		}
	}
}

// A line refused for more than it may still get is told how much that is;
// one with nothing left is told so.
func TestLineAdviceGivesWhatTheLineMayStillGet(t *testing.T) {
	n, zero := int64(2750), int64(0)
	if a := lineAdvice(quota.RefusedLineExhausted, "GROWTH", &n); !strings.Contains(a, "only 2750 more") || strings.Contains(a, "used all") {
		t.Errorf("2750 left: %q", a)
	}
	for _, left := range []*int64{&zero, nil} {
		if a := lineAdvice(quota.RefusedLineExhausted, "GROWTH", left); !strings.Contains(a, "used all it may use") {
			t.Errorf("%v left: %q", left, a)
		}
	}
}

// A refusal because the resource itself is used up (EXHAUSTED, on an apply
// that named a line) has advice too: nothing passes on any tier (no advice
// to send critical work or continuations), and what the line may still get
// when that is more than 0.
func TestExhaustedAdviceFitsTheTier(t *testing.T) {
	n, zero := int64(40), int64(0)
	for _, tier := range []string{"CORE", "GROWTH", "EXPLORE", "unknown"} {
		for _, left := range []*int64{nil, &zero, &n} {
			a := lineAdvice(quota.RefusedExhausted, tier, left)
			if !strings.Contains(a, "the resource itself is used up") || strings.Contains(a, "still pass") ||
				strings.Contains(a, "mark continuations") || (left == &n) != strings.Contains(a, "only 40 more") ||
				(tier == "CORE") != strings.Contains(a, "even a CORE line's critical work") {
				t.Errorf("%s, %v left: %q", tier, left, a)
			}
		}
	}
}
