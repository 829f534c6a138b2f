package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/quotacenter/quota-center/internal/quota"
)

// ReasonWholeNumber is the reason of a JSON number that is not an integer
// (a fraction or an exponent) given for an integer field.
const ReasonWholeNumber = "must be a whole number (a JSON number without fraction or exponent)"

// ReasonUnknownField is the reason of a member the request does not have.
const ReasonUnknownField = "is not a known field (names are case-sensitive)"

// Unmarshal reads the JSON document body into dst (a pointer; a struct is
// merged into, so preset members are defaults) with json v2 semantics:
// member names match exactly (case included), an unknown member, a name
// given twice and anything after the value are errors. Errors: a
// *quota.ValidationError whose Field is the member's name ("body" for the
// document as a whole); one returned by dst's own UnmarshalJSON is passed
// on as it is.
func Unmarshal(body []byte, dst any) error {
	if err := jsonv2.Unmarshal(body, dst, jsonv2.RejectUnknownMembers(true)); err != nil {
		return wordError(err, body)
	}
	return nil
}

// wordError turns a decoding error of body into the ValidationError a
// client sees.
func wordError(err error, body []byte) error {
	var ve *quota.ValidationError
	var sem *jsonv2.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &ve):
		return ve
	case errors.As(err, &syn):
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return &quota.ValidationError{Field: syn.JSONPointer.LastToken(), Reason: "is given twice"}
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return &quota.ValidationError{Field: "body", Reason: "is truncated JSON"}
		case syn.ByteOffset >= 0 && syn.ByteOffset < int64(len(body)):
			return &quota.ValidationError{Field: "body", Reason: fmt.Sprintf("is not valid JSON: unexpected %q at byte %d",
				body[syn.ByteOffset:syn.ByteOffset+1], syn.ByteOffset)}
		}
		return &quota.ValidationError{Field: "body", Reason: "is not valid JSON"}
	case errors.As(err, &sem):
		field := sem.JSONPointer.LastToken()
		switch {
		case errors.Is(sem.Err, jsonv2.ErrUnknownName):
			return &quota.ValidationError{Field: field, Reason: ReasonUnknownField}
		case sem.JSONPointer == "":
			return &quota.ValidationError{Field: "body", Reason: "must be a JSON object"}
		case sem.GoType != nil && isIntKind(sem.GoType.Kind()) && sem.JSONKind == '0':
			return &quota.ValidationError{Field: field, Reason: ReasonWholeNumber}
		case sem.GoType != nil:
			return &quota.ValidationError{Field: field, Reason: "must be a JSON " + goKind(sem.GoType.Kind()) + notKind(sem.JSONKind)}
		}
		return &quota.ValidationError{Field: field, Reason: "has a value this field cannot take"}
	}
	return &quota.ValidationError{Field: "body", Reason: "could not be read as JSON"}
}

func isIntKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// goKind is the JSON type a Go field of kind k takes.
func goKind(k reflect.Kind) string {
	switch {
	case k == reflect.String:
		return "string"
	case k == reflect.Bool:
		return "boolean"
	case isIntKind(k), k == reflect.Float32, k == reflect.Float64:
		return "number"
	case k == reflect.Slice, k == reflect.Array:
		return "array"
	case k == reflect.Struct, k == reflect.Map:
		return "object"
	}
	return "value of another type"
}

// notKind is ", not a string" (…) for the JSON kind given, "" when unknown.
func notKind(k jsontext.Kind) string {
	switch k {
	case '"':
		return ", not a string"
	case 't', 'f':
		return ", not a boolean"
	case '0':
		return ", not a number"
	case '{':
		return ", not an object"
	case '[':
		return ", not an array"
	}
	return ""
}

// Amount reads a JSON integer amount decoded into raw: a number literal
// without fraction or exponent, not a string or another JSON type, not -0,
// at most 2^53−1 in magnitude (range rules beyond that are the domain's).
// A missing or null member is an error when required, else 0. Errors:
// *quota.ValidationError of field.
func Amount(field string, raw []byte, required bool) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	bad := func(reason string) (int64, error) {
		return 0, &quota.ValidationError{Field: field, Reason: reason}
	}
	switch {
	case s == "" || s == "null":
		if required {
			return bad("is required")
		}
		return 0, nil
	case jsontext.Value(s).Kind() != '0':
		return bad("must be a JSON number" + notKind(jsontext.Value(s).Kind()))
	case s == "-0":
		return bad("must not be -0")
	case !IsInteger(s):
		return bad(ReasonWholeNumber)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > quota.MaxAmount || v < -quota.MaxAmount {
		return bad("must be at most 2^53-1")
	}
	return v, nil
}

// Given reports whether a member decoded into raw was sent with a value
// (present and not null).
func Given(raw []byte) bool {
	s := bytes.TrimSpace(raw)
	return len(s) > 0 && string(s) != "null"
}

// IsInteger reports whether s is a JSON integer literal: an optional minus,
// then 0 or a digit 1-9 followed by digits (no plus sign, no leading zero,
// no fraction, no exponent).
func IsInteger(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// NoNullMember refuses a JSON object body one of whose members (at the top
// level) is null, naming the first: for bodies where every member has a
// meaning when given and a default when left out, a null is neither, and
// json v2 would take it as the member's zero value (false, 0, "") or a
// nil pointer (as if absent). A body that is not an object, or not valid
// JSON, is left to Unmarshal. Errors: *quota.ValidationError of the
// member's name.
func NoNullMember(body []byte) error { return NoNullOf(body) }

// NoNullOf is NoNullMember for the members named only (none named: every
// member): for bodies where some members may be null (e.g. an apply's
// "sessionId": null, the server makes one) and others may not (its
// "critical": null would be read as absent, i.e. true, and
// "continuation": null as false). Errors: *quota.ValidationError of the
// first null member named.
func NoNullOf(body []byte, names ...string) error {
	if !mayHaveNullMember(body) {
		// Nothing below can refuse this body: skip the second parse (a
		// decoder and a dozen allocations per request).
		return nil
	}
	return noNullDecoded(body, names)
}

// noNullDecoded is NoNullOf's decoding pass.
func noNullDecoded(body []byte, names []string) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		name := tok.String() // before the next call voids tok
		if dec.PeekKind() == 'n' && (len(names) == 0 || slices.Contains(names, name)) {
			return &quota.ValidationError{Field: name, Reason: "must not be null (leave the member out to take its default)"}
		}
		if err := dec.SkipValue(); err != nil {
			return nil
		}
	}
	return nil
}

// mayHaveNullMember reports whether body has a ':' followed, after JSON
// whitespace only, by an 'n': the one pattern NoNullOf's refusal needs.
// NoNullOf refuses a member when, after its name, the decoder's PeekKind
// is 'n', which it reads from the first byte after the name's ':' and the
// whitespace around it (a "null", or any other word starting with 'n'); a
// body without the pattern is never refused, so NoNullOf answers it nil
// without decoding. A body with it (also inside a string, "a:n") is
// decoded as before.
func mayHaveNullMember(body []byte) bool {
	for i := 0; i < len(body); i++ {
		if body[i] != ':' {
			continue
		}
		j := i + 1
		for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
			j++
		}
		if j < len(body) && body[j] == 'n' {
			return true
		}
		i = j - 1
	}
	return false
}
