package quota

// charset is a set of ASCII bytes. Resource names, session ids and client
// ids are checked against one instead of a regular expression: an apply
// checks up to three, and the three regexp matches were ~5% of
// quota-center's CPU per request (profile in docs/performance-notes.md).
// TestCharsetsMatchTheirPatterns holds each set to the pattern it replaces.
type charset [256]bool

const (
	lowerLetters = "abcdefghijklmnopqrstuvwxyz"
	upperLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digits       = "0123456789"
)

// newCharset is the set of the bytes of chars (ASCII).
func newCharset(chars string) *charset {
	var c charset
	for i := range len(chars) {
		c[chars[i]] = true
	}
	return &c
}

// matches reports whether s is 1 to maxLen bytes, each in c: for a set of
// ASCII bytes, what ^[set]{1,maxLen}$ matches (a byte of a multi-byte or
// invalid UTF-8 sequence is never in the set).
func (c *charset) matches(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for i := range len(s) {
		if !c[s[i]] {
			return false
		}
	}
	return true
}
