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
	if a := lineAdvice(quota.RefusedWatermark, "CORE"); !strings.Contains(a, "critical work still passes") {
		t.Errorf("CORE watermark: %q", a)
	}
	for _, tier := range []string{"GROWTH", "EXPLORE", "unknown"} {
		a := lineAdvice(quota.RefusedWatermark, tier)
		if strings.Contains(a, "critical") || !strings.Contains(a, "continuations") || !strings.Contains(a, tier) {
			t.Errorf("%s watermark: %q", tier, a)
		}
	}
	for _, r := range []quota.RefusalReason{quota.RefusedLineExhausted, quota.RefusedPoolExhausted} {
		if a := lineAdvice(r, "EXPLORE"); a == "" || strings.Contains(a, "critical") {
			t.Errorf("%s: %q", r, a)
		}
	}
}
