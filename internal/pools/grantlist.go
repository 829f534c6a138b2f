package pools

import (
	"strconv"
	"strings"
)

// FormatGrants writes what a session holds of each grant as "id=n;id=n"
// (the form the Lua scripts and the ledger keep).
func FormatGrants(gs []GrantDraw) string {
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(g.ID + "=" + strconv.FormatInt(g.Amount, 10))
	}
	return b.String()
}

// ParseGrants reads FormatGrants' form; "" is none.
func ParseGrants(s string) []GrantDraw {
	if s == "" {
		return nil
	}
	var out []GrantDraw
	for _, part := range strings.Split(s, ";") {
		id, n, _ := strings.Cut(part, "=")
		v, _ := strconv.ParseInt(n, 10, 64)
		out = append(out, GrantDraw{ID: id, Amount: v})
	}
	return out
}
