package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Auth says who may call the API. Its tokens and keys are Secrets: they
// print and marshal as "***", and no error message or log line carries them.
type Auth struct {
	// AdminTokens are the bearer tokens accepted on /admin/*
	// (QC_ADMIN_TOKENS). With none, /admin/* is open in dev mode and refused
	// with 403 in production.
	AdminTokens []AdminToken
	// APIKeys are the X-API-Key values accepted on /quota/* (QC_API_KEYS).
	// With none, the client endpoints are open: in production only when
	// InsecureOpenQuota says so, else the configuration is refused.
	APIKeys []APIKey
	// InsecureOpenQuota (QC_INSECURE_OPEN_QUOTA) leaves /quota/* open to
	// anyone who can reach it in production, with no QC_API_KEYS: an
	// explicit choice, never a default. Dev mode needs no such flag.
	InsecureOpenQuota bool
}

// AdminToken is one admin bearer token. Name is the actor recorded in the
// audit log; several tokens may share a name (rotation).
type AdminToken struct {
	Name  string
	Token Secret
}

// APIKey binds a client API key to a clientId and the resources it may use.
type APIKey struct {
	Key          Secret
	ClientID     string
	Resources    []string // the resources it may use, unless AllResources
	AllResources bool     // "*": every resource
	Line         string   // "#line" after the list: its applies are for this business line only
}

// Secret is a token or key. It prints and marshals as "***" (as "" when
// empty) so that it cannot reach a log by accident; string(s) is the value.
type Secret string

func (s Secret) masked() string {
	if s == "" {
		return ""
	}
	return "***"
}

// String masks the secret.
func (s Secret) String() string { return s.masked() }

// GoString masks the secret (%#v).
func (s Secret) GoString() string { return `"` + s.masked() + `"` }

// MarshalText masks the secret (JSON, YAML and zap's reflection encoder).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.masked()), nil }

// Rules of the auth settings.
const (
	// MinSecretLength is the shortest admin token or API key, in characters.
	MinSecretLength = 16
	// MaxSecretLength is the longest admin token or API key, in characters.
	MaxSecretLength = 256
	// DefaultAdminName is the name of an admin token given without one.
	DefaultAdminName = "admin"
)

var (
	adminNameRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)
	// secretRE: visible ASCII (! to ~) without the separators ',' and ';'.
	secretRE = regexp.MustCompile(`^[!-+\--:<-~]+$`)
)

// ParseAdminTokens parses QC_ADMIN_TOKENS: comma-separated "name:token"
// entries; a bare "token" is named DefaultAdminName. The name ends at the
// first ':', so a token may contain ':' when a name is given. Blank input
// means none. Errors name the entry by position, never by its token; the
// rules on names and tokens are checked by Validate.
func ParseAdminTokens(s string) ([]AdminToken, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []AdminToken
	var errs []error
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			errs = append(errs, fmt.Errorf("admin-tokens entry %d is empty", i+1))
			continue
		}
		name, tok, ok := strings.Cut(e, ":")
		if !ok {
			name, tok = DefaultAdminName, e
		}
		out = append(out, AdminToken{Name: name, Token: Secret(tok)})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParseAPIKeys parses QC_API_KEYS: semicolon-separated entries
// "key=clientId:res1,res2" or "key=clientId:*" (every resource), optionally
// followed by "#line" to bind the key to one business line. The key
// ends at the last '=' and the clientId at the last ':', so a key may end
// in '=' padding and a clientId may contain ':'. Blank input means none.
// Errors name the entry by position, never by its key; the rules on keys,
// client ids and resource names are checked by Validate.
var lineRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

func ParseAPIKeys(s string) ([]APIKey, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []APIKey
	var errs []error
	for i, e := range strings.Split(s, ";") {
		e = strings.TrimSpace(e)
		bad := func(reason string) { errs = append(errs, fmt.Errorf("api-keys entry %d: %s", i+1, reason)) }
		if e == "" {
			bad("is empty")
			continue
		}
		eq := strings.LastIndexByte(e, '=')
		if eq < 0 {
			bad("want key=clientId:res1,res2 or key=clientId:* (no '=')")
			continue
		}
		key, rest := e[:eq], e[eq+1:]
		colon := strings.LastIndexByte(rest, ':')
		if colon < 0 {
			bad("want key=clientId:res1,res2 or key=clientId:* (no ':' after the clientId)")
			continue
		}
		k := APIKey{Key: Secret(strings.TrimSpace(key)), ClientID: strings.TrimSpace(rest[:colon])}
		list, line, bound := strings.Cut(strings.TrimSpace(rest[colon+1:]), "#")
		if bound {
			k.Line = strings.TrimSpace(line)
			if !lineRE.MatchString(k.Line) {
				bad("the business line after '#' must be 1 to 64 characters of [a-z0-9_.-]")
				continue
			}
		}
		if list = strings.TrimSpace(list); list == "*" {
			k.AllResources = true
		} else {
			for _, r := range strings.Split(list, ",") {
				k.Resources = append(k.Resources, strings.TrimSpace(r))
			}
		}
		out = append(out, k)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// secretProblem says what is wrong with a token or key, or "".
func secretProblem(s Secret) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) < MinSecretLength || len(s) > MaxSecretLength:
		return fmt.Sprintf("must be %d to %d characters, got %d", MinSecretLength, MaxSecretLength, len(s))
	case !secretRE.MatchString(string(s)):
		return "must be visible ASCII without spaces, ',' or ';'"
	}
	return ""
}

// validate checks the auth settings. Errors name entries by position, name
// or clientId, never by their secret.
func (a Auth) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	tokens := map[Secret]int{}
	for i, t := range a.AdminTokens {
		where := fmt.Sprintf("admin-tokens entry %d", i+1)
		if !adminNameRE.MatchString(t.Name) {
			bad("%s: name must be 1 to 64 characters of [A-Za-z0-9_.@-]", where)
		}
		if p := secretProblem(t.Token); p != "" {
			bad("%s: token %s", where, p)
			continue
		}
		if j, dup := tokens[t.Token]; dup {
			bad("%s: same token as entry %d", where, j)
			continue
		}
		tokens[t.Token] = i + 1
	}
	keys := map[Secret]int{}
	for i, k := range a.APIKeys {
		where := fmt.Sprintf("api-keys entry %d", i+1)
		if quota.ValidateClientID(k.ClientID) != nil {
			bad("%s: clientId must be 1 to 128 characters of [A-Za-z0-9_.:@/-]", where)
		}
		switch {
		case k.AllResources && len(k.Resources) > 0:
			bad("%s: give either * or a list of resources", where)
		case !k.AllResources && len(k.Resources) == 0:
			bad("%s: list the resources the key may use, or *", where)
		}
		// Resource values are not quoted back: a misplaced separator could
		// make part of a key look like one.
		for j, r := range k.Resources {
			if r == "*" {
				bad("%s: * must stand alone", where)
			} else if quota.ValidateResourceName(r) != nil {
				bad("%s: resource %d of the list must be 1 to 64 characters of [a-z0-9_.-]", where, j+1)
			}
		}
		if p := secretProblem(k.Key); p != "" {
			bad("%s: key %s", where, p)
			continue
		}
		if j, dup := keys[k.Key]; dup {
			bad("%s: same key as entry %d", where, j)
			continue
		}
		keys[k.Key] = i + 1
		if _, clash := tokens[k.Key]; clash {
			bad("%s: key is also an admin token", where)
		}
	}
	return errs
}
