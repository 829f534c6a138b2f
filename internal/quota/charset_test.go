package quota

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// Each charset check accepts exactly what the regular expression it
// replaced accepts, on random strings of the set's bytes and of others
// (a trailing newline, spaces, non-ASCII and invalid UTF-8), around each
// length bound.
func TestCharsetsMatchTheirPatterns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	pieces := strings.Split(lowerLetters+upperLetters+digits+"_.:@/-", "")
	pieces = append(pieces, " ", "\n", "\t", "\x00", "é", "日", "\xff", "\xc3", "+", "=", "\\", "%", "a\n")
	for _, c := range []struct {
		name string
		re   *regexp.Regexp
		ok   func(string) bool
	}{
		{"resource name", regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`), func(s string) bool { return resourceNameChars.matches(s, 64) }},
		{"session id", regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`), func(s string) bool { return sessionIDChars.matches(s, 64) }},
		{"client id", regexp.MustCompile(`^[A-Za-z0-9_.:@/-]{1,128}$`), func(s string) bool { return clientIDChars.matches(s, 128) }},
	} {
		accepted := 0
		for i := range 20000 {
			var b strings.Builder
			n := rng.IntN(140)
			if i%4 == 0 {
				n = []int{0, 1, 63, 64, 65, 127, 128, 129}[rng.IntN(8)]
			}
			odd := rng.IntN(3) == 0 // most strings of the set's bytes only
			for range n {
				p := pieces[rng.IntN(len(pieces))]
				for !odd && !c.re.MatchString(p) {
					p = pieces[rng.IntN(len(pieces))]
				}
				b.WriteString(p)
			}
			s := b.String()
			want := c.re.MatchString(s)
			if got := c.ok(s); got != want {
				t.Fatalf("%s %q: charset says %v, the pattern %v", c.name, s, got, want)
			}
			if want {
				accepted++
			}
		}
		if accepted < 1000 {
			t.Fatalf("%s: only %d of the strings accepted; the test does not cover both sides", c.name, accepted)
		}
	}
}
