package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/quotacenter/quota-center/internal/quota"
)

// errBodyTooLarge is returned by decode when the body exceeds the limit (413).
var errBodyTooLarge = errors.New("request body too large")

// errRequestTimeout is returned by decode when the body trickles in slower
// than the server's read timeout (408).
var errRequestTimeout = errors.New("request timeout")

// errMediaType is returned by decode for a non-JSON Content-Type (415).
var errMediaType = errors.New("unsupported media type")

var integerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// decode reads one JSON object from r.Body into dst, strictly: a JSON
// Content-Type (or none), no unknown fields (names match exactly, case
// included), no duplicate keys, nothing after the object. The body was
// already capped by http.MaxBytesReader.
func decode(r *http.Request, dst any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/problem+json") {
			return fmt.Errorf("%w: Content-Type must be application/json, got %q", errMediaType, ct)
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: limit is %d bytes", errBodyTooLarge, mbe.Limit)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%w: the body did not arrive within the server's read timeout", errRequestTimeout)
		}
		// The transport error names sockets; the caller learns only what
		// went wrong for it.
		return &quota.ValidationError{Field: "body", Reason: "could not be read (the connection broke or the body was cut short)"}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return &quota.ValidationError{Field: "body", Reason: "is empty; send a JSON object"}
	}
	if err := checkKeys(body, fieldNames(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &quota.ValidationError{Field: "body", Reason: "has data after the JSON object"}
	}
	return nil
}

// checkKeys rejects an object that names a key twice, or a key that is not
// exactly one of known (nil: any key): encoding/json would silently keep the
// last of two keys, and it matches keys case-insensitively, so "APPLYAMOUNT"
// next to "applyAmount" would overwrite it and a proxy and this server could
// read two different requests from one body.
func checkKeys(body []byte, known map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &quota.ValidationError{Field: "body", Reason: "must be a JSON object"}
	}
	seen := make(map[string]bool, 8)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		key, _ := tok.(string)
		if known != nil && !known[key] {
			return &quota.ValidationError{Field: key, Reason: "is not a known field (names are case-sensitive)"}
		}
		if seen[key] {
			return &quota.ValidationError{Field: key, Reason: "is given twice"}
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return jsonError(err)
		}
	}
	return nil
}

var fieldNameCache sync.Map // reflect.Type → map[string]bool

// fieldNames returns the JSON member names of the struct dst points to, as
// its json tags spell them; nil when dst is not a pointer to a struct.
func fieldNames(dst any) map[string]bool {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	t = t.Elem()
	if v, ok := fieldNameCache.Load(t); ok {
		return v.(map[string]bool)
	}
	names := map[string]bool{}
	addFieldNames(t, names)
	fieldNameCache.Store(t, names)
	return names
}

func addFieldNames(t reflect.Type, names map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case name == "-":
		case f.Anonymous && name == "" && ft.Kind() == reflect.Struct:
			addFieldNames(ft, names) // promoted fields, as encoding/json does
		case !f.IsExported():
		case name == "":
			names[f.Name] = true
		default:
			names[name] = true
		}
	}
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var ve *quota.ValidationError
	switch {
	case errors.As(err, &ve):
		return ve
	case errors.As(err, &te):
		return &quota.ValidationError{Field: te.Field, Reason: "must be a JSON " + jsonKind(te.Type.Kind().String())}
	case errors.As(err, &se):
		return &quota.ValidationError{Field: "body", Reason: "is not valid JSON: " + se.Error()}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &quota.ValidationError{Field: "body", Reason: "is truncated JSON"}
	}
	return &quota.ValidationError{Field: "body", Reason: err.Error()}
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	}
	return "value of another type"
}

// parseAmount reads a JSON integer amount: a number literal without
// fraction or exponent, not a string, not -0, at most 2^53−1 in magnitude
// (range rules beyond that are the domain's). A missing or null field is an
// error when required, else 0.
func parseAmount(field string, raw json.RawMessage, required bool) (int64, error) {
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
	case s[0] == '"':
		return bad("must be a JSON number, not a string")
	case s == "-0":
		return bad("must not be -0")
	case !integerRE.MatchString(s):
		return bad("must be a whole number (no fraction or exponent)")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > quota.MaxAmount || v < -quota.MaxAmount {
		return bad("must be at most 2^53-1")
	}
	return v, nil
}
