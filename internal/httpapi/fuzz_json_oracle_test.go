package httpapi

import (
	"bytes"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ---- The oracle: an independent strict reading of request bodies. ----

type fzVerdict int

const (
	fzBad    fzVerdict = iota + 1 // must be refused with 400
	fzGood                        // well-formed: must not be refused as bad input
	fzUnsure                      // the oracle cannot tell (e.g. a cron expression)
)

type fzKind int

const (
	fzStr fzKind = iota + 1
	fzNum
	fzNull
)

// fzVal is one member value of a flat object.
type fzVal struct {
	kind fzKind
	s    string // a string's decoded text; a number's literal
	ok   bool   // a string: valid UTF-8, no lone surrogate
}

// fzParseObject reads body as exactly one JSON object (RFC 8259) whose
// members are strings, numbers or null, each key once. ok is false for
// anything else, including valid JSON with a nested value, a boolean, a
// duplicate key or data after the object: a request body of this API never
// holds those and must be refused.
func fzParseObject(body []byte) (map[string]fzVal, bool) {
	p := fzParser{b: body}
	p.ws()
	if !p.eat('{') {
		return nil, false
	}
	m := map[string]fzVal{}
	p.ws()
	if !p.eat('}') {
		for {
			p.ws()
			k, ok := p.str()
			if !ok || !k.ok {
				return nil, false // a key that is not valid UTF-8 names no field
			}
			if _, dup := m[k.s]; dup {
				return nil, false
			}
			p.ws()
			if !p.eat(':') {
				return nil, false
			}
			p.ws()
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			m[k.s] = v
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat('}') {
				break
			}
			return nil, false
		}
	}
	p.ws()
	return m, p.i == len(p.b)
}

type fzParser struct {
	b []byte
	i int
}

func (p *fzParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *fzParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fzParser) value() (fzVal, bool) {
	if p.i >= len(p.b) {
		return fzVal{}, false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case bytes.HasPrefix(p.b[p.i:], []byte("null")):
		p.i += 4
		return fzVal{kind: fzNull}, true
	}
	return fzVal{}, false // true, false, objects, arrays, garbage
}

func (p *fzParser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *fzParser) number() (fzVal, bool) {
	start := p.i
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.i < len(p.b) && p.b[p.i] >= '1' && p.b[p.i] <= '9':
		p.digits()
	default:
		return fzVal{}, false
	}
	if p.eat('.') && p.digits() == 0 {
		return fzVal{}, false
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if p.digits() == 0 {
			return fzVal{}, false
		}
	}
	return fzVal{kind: fzNum, s: string(p.b[start:p.i])}, true
}

func fzHex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), err == nil && !bytes.ContainsAny(b[:4], "+-_")
}

// str reads a string, decoding its escapes.
func (p *fzParser) str() (fzVal, bool) {
	if !p.eat('"') {
		return fzVal{}, false
	}
	var sb strings.Builder
	v := fzVal{kind: fzStr, ok: true}
	for {
		if p.i >= len(p.b) {
			return fzVal{}, false
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			v.s = sb.String()
			return v, true
		case c < 0x20:
			return fzVal{}, false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return fzVal{}, false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				sb.WriteByte(e)
			case 'b':
				sb.WriteByte('\b')
			case 'f':
				sb.WriteByte('\f')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case 'u':
				r, ok := fzHex4(p.b[p.i:])
				if !ok {
					return fzVal{}, false
				}
				p.i += 4
				if utf16.IsSurrogate(r) {
					if r < 0xdc00 && bytes.HasPrefix(p.b[p.i:], []byte(`\u`)) {
						if r2, ok := fzHex4(p.b[p.i+2:]); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
							p.i += 6
							sb.WriteRune(utf16.DecodeRune(r, r2))
							continue
						}
					}
					v.ok = false
					r = utf8.RuneError
				}
				sb.WriteRune(r)
			default:
				return fzVal{}, false
			}
		case c < utf8.RuneSelf:
			sb.WriteByte(c)
			p.i++
		default:
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n == 1 {
				v.ok = false
			}
			sb.Write(p.b[p.i : p.i+n])
			p.i += n
		}
	}
}

// fzTrimJSONSpace drops JSON white space (space, tab, CR, LF) at both ends.
func fzTrimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

// fzWantAmount is the oracle of parseAmount on a trimmed value: "" and null
// are 0 unless required; else an integer literal (no fraction, exponent,
// quotes or -0) of magnitude at most 2^53−1.
func fzWantAmount(s []byte, required bool) (int64, bool) {
	if len(s) == 0 || string(s) == "null" {
		return 0, !required
	}
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) || string(s) == "-0" {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, ok := new(big.Int).SetString(string(s), 10)
	if !ok || new(big.Int).Abs(n).Cmp(fzMaxAmount) > 0 {
		return 0, false
	}
	return n.Int64(), true
}

// fzAmount is a member as an amount in lo … 2^53−1: ok false when it is not
// a plain integer literal in that range; present false when absent or null.
func fzAmount(m map[string]fzVal, key string, lo int64) (v int64, present, ok bool) {
	x, there := m[key]
	if !there || x.kind == fzNull {
		return 0, false, true
	}
	if x.kind != fzNum {
		return 0, true, false
	}
	v, ok = fzWantAmount([]byte(x.s), true)
	return v, true, ok && v >= lo
}

// fzString is a string member; absent and null are "".
func fzString(m map[string]fzVal, key string) (string, bool) {
	x, there := m[key]
	switch {
	case !there || x.kind == fzNull:
		return "", true
	case x.kind != fzStr:
		return "", false
	}
	return x.s, x.ok
}

// fzOnly reports whether m holds no key outside known.
func fzOnly(m map[string]fzVal, known ...string) bool {
	n := 0
	for _, k := range known {
		if _, ok := m[k]; ok {
			n++
		}
	}
	return n == len(m)
}

// fzCharset reports whether s is lo … hi bytes, each in allowed.
func fzCharset(s string, lo, hi int, allowed string) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte(allowed, c) >= 0) {
			return false
		}
	}
	return true
}

const fzUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
