package reconcile_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/reconcile"
)

func TestReportWritesPeriodStartWithMilliseconds(t *testing.T) {
	r := reconcile.Report{Resource: "r", PeriodStart: time.Date(2026, 11, 30, 13, 0, 33, 190_000_000, time.FixedZone("x", 3600)), DriftCharged: -2}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"periodStart":"2026-11-30T12:00:33.190Z"`, `"resource":"r"`, `"driftCharged":-2`} {
		if !strings.Contains(s, want) {
			t.Errorf("%s lacks %s", s, want)
		}
	}
	if strings.Count(s, `"periodStart"`) != 1 {
		t.Errorf("periodStart twice: %s", s)
	}
}
