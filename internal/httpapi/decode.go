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
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/strictjson"
)

// errBodyTooLarge is returned by decode when the body exceeds the limit (413).
var errBodyTooLarge = errors.New("request body too large")

// errRequestTimeout is returned by decode when the body trickles in slower
// than the server's read timeout (408).
var errRequestTimeout = errors.New("request timeout")

// errMediaType is returned by decode for a non-JSON Content-Type (415).
var errMediaType = errors.New("unsupported media type")

// errContentCoding is wrapped with errMediaType for a Content-Encoding the
// server does not take: the 415 then says which it takes (Accept-Encoding:
// identity, RFC 9110 §12.5.3).
var errContentCoding = errors.New("unsupported content coding")

// noQuery refuses a query string on an endpoint that reads none, so that
// a parameter is never silently ignored. Errors: *quota.ValidationError.
func noQuery(r *http.Request) error {
	if r.URL.RawQuery != "" {
		return &quota.ValidationError{Field: "query", Reason: "this endpoint takes no query parameters"}
	}
	return nil
}

// noBody refuses a request body on an endpoint that reads none, so that
// e.g. {"resourceName":…} or a malformed body is never silently ignored
// while the step runs anyway. Errors: *quota.ValidationError.
func noBody(r *http.Request) error {
	if n, _ := r.Body.Read(make([]byte, 1)); n > 0 {
		return &quota.ValidationError{Field: "body", Reason: "this endpoint takes no body"}
	}
	return nil
}

// noInput is noQuery and noBody: a step named by its path alone.
func noInput(r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	return noBody(r)
}

// decode reads one JSON object from r.Body into dst, strictly: no query
// parameters, one JSON Content-Type (or none), no unknown fields (names
// match exactly, case included), no duplicate keys, nothing after the
// object. The body was already capped by http.MaxBytesReader. Errors: a
// *quota.ValidationError (400), or one wrapping errMediaType (415),
// errBodyTooLarge (413) or errRequestTimeout (408).
func decode(r *http.Request, dst any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	// One pass with json v2 semantics (strictjson): member names match
	// exactly (case included), a name given twice and an unknown name are
	// errors, and so is anything after the object. encoding/json would
	// silently keep the last of two keys and match keys case-insensitively,
	// so "APPLYAMOUNT" next to "applyAmount" would overwrite it and a proxy
	// and this server could read two different requests from one body.
	return strictjson.Unmarshal(body, dst)
}

// decodeNoNull is decode for a body none of whose members may be null
// (the pools' admin bodies): a null member is refused naming it, where
// decode would take it as the member's zero value or as absent ("dedicated":
// null was answered about the weight, "reclaimDryRun": null stored false).
// Errors: decode's.
func decodeNoNull(r *http.Request, dst any) error { return decodeNoNullOf(r, dst) }

// decodeNoNullOf is decodeNoNull for the members named only (none: every
// member), e.g. an apply's "critical" and "continuation", which json v2
// would read as absent (true) and false. Errors: decode's.
func decodeNoNullOf(r *http.Request, dst any, names ...string) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := strictjson.NoNullOf(body, names...); err != nil {
		return err
	}
	return strictjson.Unmarshal(body, dst)
}

// readBody is decode's checks of the request and its read of the body:
// the body, neither empty nor a bare null.
func readBody(r *http.Request) ([]byte, error) {
	if r.URL.RawQuery != "" {
		// These endpoints read only their body: a parameter in the query
		// would be silently ignored (e.g. ?resourceName=… next to another
		// in the body), so it is refused like an unknown field.
		return nil, &quota.ValidationError{Field: "query", Reason: "this endpoint takes no query parameters; send the fields in the JSON body"}
	}
	if cts := r.Header.Values("Content-Type"); len(cts) > 1 {
		return nil, fmt.Errorf("%w: send one Content-Type header, got %d", errMediaType, len(cts))
	}
	// The exact "application/json" every client sends needs no parsing
	// (mime.ParseMediaType allocates a parameter map per call).
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/problem+json") {
			return nil, fmt.Errorf("%w: Content-Type must be application/json, got %q", errMediaType, ct)
		}
		// JSON is UTF-8 (RFC 8259 §8.1): a body said to be in another
		// charset would be read as UTF-8 all the same, so it is refused.
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return nil, fmt.Errorf("%w: a JSON body is UTF-8, got charset %q", errMediaType, cs)
		}
	}
	// A body in a content coding (gzip, …) would be read as if it were
	// plain JSON: refused, as RFC 9110 §8.4.1 says a server does with a
	// coding it does not take.
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 0 {
		for _, v := range ce {
			for _, c := range strings.Split(v, ",") {
				if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
					return nil, fmt.Errorf("%w: %w: Content-Encoding %q is not taken; send the JSON body unencoded", errMediaType, errContentCoding, c)
				}
			}
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: limit is %d bytes", errBodyTooLarge, mbe.Limit)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%w: the body did not arrive within the server's read timeout", errRequestTimeout)
		}
		// The transport error names sockets; the caller learns only what
		// went wrong for it.
		return nil, &quota.ValidationError{Field: "body", Reason: "could not be read (the connection broke or the body was cut short)"}
	}
	switch trimmed := bytes.TrimSpace(body); {
	case len(trimmed) == 0:
		return nil, &quota.ValidationError{Field: "body", Reason: "is empty; send a JSON object"}
	case string(trimmed) == "null":
		// json v2 reads a top-level null into a struct as "nothing", which
		// would make an optional body (reset, forced finish) an empty one.
		return nil, &quota.ValidationError{Field: "body", Reason: "must be a JSON object"}
	}
	return body, nil
}

// reasonWholeNumber is the reason of a JSON number with a fraction or an
// exponent given for an integer field.
const reasonWholeNumber = strictjson.ReasonWholeNumber

// parseAmount is strictjson.Amount: a JSON integer amount (errors:
// *quota.ValidationError of field).
func parseAmount(field string, raw json.RawMessage, required bool) (int64, error) {
	return strictjson.Amount(field, raw, required)
}

// given is strictjson.Given.
func given(raw json.RawMessage) bool { return strictjson.Given(raw) }

// isInteger is strictjson.IsInteger.
func isInteger(s string) bool { return strictjson.IsInteger(s) }
