package display

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Grouped writes v with a comma every three digits: 1234567 → "1,234,567".
func Grouped(v int64) string {
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Clock writes a number of seconds as h:mm:ss (hours not bounded, "-" in
// front when negative): 3725 → "1:02:05", 18000 → "5:00:00".
func Clock(seconds int64) string {
	sign := ""
	if seconds < 0 {
		sign, seconds = "-", -seconds
	}
	return fmt.Sprintf("%s%d:%02d:%02d", sign, seconds/3600, seconds/60%60, seconds%60)
}

// Amount writes v in unit ("seconds", "calls", "tokens" or "bytes", as
// quota.QuotaType.Unit names them): seconds as h:mm:ss, the others grouped
// and followed by the unit, e.g. "12,500 tokens".
func Amount(unit string, v int64) string {
	if unit == "seconds" {
		return Clock(v)
	}
	if unit == "" {
		return Grouped(v)
	}
	return Grouped(v) + " " + unit
}

// Rate writes a burn rate (unit per second): seconds per second as a plain
// decimal with "s/s", the others grouped with "/s", e.g. "1,250.5 tokens/s".
// A nil rate is "—" (unknown).
func Rate(unit string, r *float64) string {
	if r == nil {
		return "—"
	}
	v := *r
	whole := int64(math.Floor(v))
	frac := int64(math.Round((v - float64(whole)) * 10))
	if frac == 10 {
		whole, frac = whole+1, 0
	}
	n := Grouped(whole)
	if frac != 0 {
		n += "." + strconv.FormatInt(frac, 10)
	}
	if unit == "seconds" {
		return n + " s/s"
	}
	return n + " " + unit + "/s"
}

// Until writes the time from now to t as h:mm:ss, "now" when t is not
// after now, and "—" for a nil t (never, or unknown).
func Until(now time.Time, t *time.Time) string {
	if t == nil {
		return "—"
	}
	d := t.Sub(now)
	if d <= 0 {
		return "now"
	}
	return Clock(int64(d.Round(time.Second) / time.Second))
}
