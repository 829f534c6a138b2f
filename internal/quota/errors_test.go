package quota_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quotacenter/quota-center/internal/quota"
)

func TestClipMessageBoundsWhatIsQuoted(t *testing.T) {
	short := "invalid x: is not a known field"
	if got := quota.ClipMessage(short); got != short {
		t.Fatalf("a short message changed: %q", got)
	}
	exact := strings.Repeat("a", quota.MaxMessageBytes)
	if got := quota.ClipMessage(exact); got != exact {
		t.Fatalf("a message of exactly %d bytes was cut", quota.MaxMessageBytes)
	}
	// 3-byte runes: the cut at 1024 falls inside one and must move back.
	long := "invalid " + strings.Repeat("é€", 1000) + ": is not a known field"
	got := quota.ClipMessage(long)
	body, tail, ok := strings.Cut(got, "… (")
	if !ok || tail != "5030 bytes in all)" {
		t.Fatalf("clipped message %q…%q, want it to end with the length", got[:40], got[len(got)-30:])
	}
	if len(body) > quota.MaxMessageBytes || len(body) < quota.MaxMessageBytes-3 || !utf8.ValidString(got) || !strings.HasPrefix(long, body) {
		t.Fatalf("kept %d bytes (valid UTF-8 %v), want a prefix of %d-3 … %d bytes cut at a rune boundary",
			len(body), utf8.ValidString(got), quota.MaxMessageBytes, quota.MaxMessageBytes)
	}
}
