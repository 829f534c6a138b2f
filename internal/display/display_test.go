package display

import (
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	r := func(v float64) *float64 { return &v }
	now := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	at := now.Add(90*time.Minute + 5*time.Second)
	past := now.Add(-time.Second)
	for _, tc := range []struct{ got, want string }{
		{Grouped(0), "0"}, {Grouped(999), "999"}, {Grouped(1000), "1,000"}, {Grouped(-1234567), "-1,234,567"},
		{Grouped(9007199254740991), "9,007,199,254,740,991"},
		{Clock(0), "0:00:00"}, {Clock(3725), "1:02:05"}, {Clock(18000), "5:00:00"}, {Clock(-61), "-0:01:01"},
		{Clock(360000), "100:00:00"},
		{Amount("seconds", 5400), "1:30:00"}, {Amount("tokens", 12500), "12,500 tokens"}, {Amount("", 5), "5"},
		{Rate("tokens", r(1250.54)), "1,250.5 tokens/s"}, {Rate("seconds", r(2)), "2 s/s"}, {Rate("calls", r(0.96)), "1 calls/s"},
		{Rate("bytes", nil), "—"},
		{Until(now, &at), "1:30:05"}, {Until(now, &past), "now"}, {Until(now, nil), "—"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
