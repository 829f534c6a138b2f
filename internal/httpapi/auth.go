package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Errors of authentication and authorization. writeError maps them to 401
// UNAUTHENTICATED and 403 PERMISSION_DENIED; their messages never carry a
// token or key.
var (
	// ErrUnauthenticated: the admin token or API key is missing or unknown
	// (HTTP 401 UNAUTHENTICATED, with a WWW-Authenticate challenge).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the credentials are known but may not do this, or
	// the endpoint is disabled (HTTP 403 PERMISSION_DENIED); it is the
	// domain's quota.ErrPermissionDenied.
	ErrPermissionDenied = quota.ErrPermissionDenied
)

// AuthConfig says who may call the API. The zero value leaves every endpoint
// open, as in dev mode.
type AuthConfig struct {
	// AdminTokens are accepted as "Authorization: Bearer <token>" on
	// /admin/*. With none, /admin/* is open, unless Production.
	AdminTokens []AdminToken
	// APIKeys are accepted as "X-API-Key: <key>" on /quota/*. With none, the
	// client endpoints are open and take the clientId as given.
	APIKeys []APIKey
	// Production: with no AdminTokens, /admin/* answers 403 instead of being
	// open, so a production server never has an open admin surface.
	Production bool
}

// AdminToken is one admin bearer token; Name is the actor recorded in the
// audit log.
type AdminToken struct {
	Name  string
	Token string
}

// APIKey binds a client key to a clientId and the resources it may use.
type APIKey struct {
	Key          string
	ClientID     string
	Resources    []string // unless AllResources
	AllResources bool
	Line         string // "": any business line; else applies must name this one
}

// authError is an auth failure with its exact wire message.
type authError struct {
	kind error // ErrUnauthenticated or ErrPermissionDenied
	msg  string
}

func (e *authError) Error() string { return e.msg }
func (e *authError) Unwrap() error { return e.kind }

func unauthenticated(msg string) error { return &authError{kind: ErrUnauthenticated, msg: msg} }
func denied(msg string) error          { return &authError{kind: ErrPermissionDenied, msg: msg} }

// auth holds the credentials as SHA-256 digests: the server keeps no
// plaintext secret, and comparing fixed-length digests does not leak a
// token's length.
type auth struct {
	adminNames  []string
	adminHashes [][sha256.Size]byte
	production  bool
	keys        map[[sha256.Size]byte]*clientKey
}

// clientKey is what an API key may do.
type clientKey struct {
	clientID  string
	all       bool
	resources map[string]bool
	line      string
}

func newAuth(c AuthConfig) *auth {
	a := &auth{production: c.Production}
	for _, t := range c.AdminTokens {
		a.adminNames = append(a.adminNames, t.Name)
		a.adminHashes = append(a.adminHashes, sha256.Sum256([]byte(t.Token)))
	}
	if len(c.APIKeys) > 0 {
		a.keys = make(map[[sha256.Size]byte]*clientKey, len(c.APIKeys))
		for _, k := range c.APIKeys {
			ck := &clientKey{clientID: k.ClientID, all: k.AllResources, resources: map[string]bool{}, line: k.Line}
			for _, r := range k.Resources {
				ck.resources[r] = true
			}
			a.keys[sha256.Sum256([]byte(k.Key))] = ck
		}
	}
	return a
}

// adminName returns the name of the admin token equal to token. It compares
// the digest of token with every configured one in constant time, with no
// early exit, so the time taken says nothing about which one (if any)
// matched.
func (a *auth) adminName(token string) (string, bool) {
	h := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.adminHashes {
		eq := subtle.ConstantTimeCompare(h[:], a.adminHashes[i][:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return "", false
	}
	return a.adminNames[match], true
}

// bearerChallenge is the WWW-Authenticate challenge of a 401 on /admin/*.
const bearerChallenge = `Bearer realm="quota-center"`

// adminAuth guards /admin/*: with admin tokens configured it requires
// "Authorization: Bearer <token>" (else 401) and puts the token's name in
// the context as the audit actor; without any it lets every call through
// as quota.AnonymousActor (dev mode) or refuses it with 403 (Production).
func (s *Server) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.auth.adminHashes) == 0 {
			if s.auth.production {
				s.writeError(w, r, denied("admin endpoints are disabled: set QC_ADMIN_TOKENS"))
				return
			}
			next.ServeHTTP(w, r.WithContext(quota.WithActor(r.Context(), quota.AnonymousActor)))
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", bearerChallenge)
			s.writeError(w, r, unauthenticated("missing admin token: send one Authorization: Bearer <token> header"))
			return
		}
		name, ok := s.auth.adminName(token)
		if !ok {
			w.Header().Set("WWW-Authenticate", bearerChallenge+`, error="invalid_token"`)
			s.writeError(w, r, unauthenticated("invalid admin token"))
			return
		}
		next.ServeHTTP(w, r.WithContext(quota.WithActor(r.Context(), name)))
	})
}

// bearerToken reads the token of the one "Authorization: Bearer <token>"
// header (the scheme is case-insensitive).
func bearerToken(r *http.Request) (string, bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// apiKeyHeader is the header of the client API key.
const apiKeyHeader = "X-API-Key"

// apiKeyChallenge is the WWW-Authenticate challenge of a 401 on /quota/*
// (RFC 9110 wants one on every 401; there is no registered scheme for API
// keys).
const apiKeyChallenge = `APIKey realm="quota-center", header="X-API-Key"`

type clientKeyCtx struct{}

// clientAuth guards /quota/*: with API keys configured it requires a known
// X-API-Key (else 401) and puts what the key may do in the context, where
// the handlers check it with authorize once they have decoded the request.
// Without keys every call goes through.
func (s *Server) clientAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.auth.keys == nil {
			next.ServeHTTP(w, r)
			return
		}
		var err error
		var k *clientKey
		switch vals := r.Header.Values(apiKeyHeader); {
		case len(vals) == 0 || vals[0] == "":
			err = unauthenticated("missing API key: send the X-API-Key header")
		case len(vals) > 1:
			err = unauthenticated("send one X-API-Key header")
		default:
			// The map is keyed by SHA-256 digests: the lookup's time depends
			// on the digest, which tells nothing about a key.
			if k = s.auth.keys[sha256.Sum256([]byte(vals[0]))]; k == nil {
				err = unauthenticated("invalid API key")
			}
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", apiKeyChallenge)
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKeyCtx{}, k)))
	})
}

// authorize checks that the request's API key may use resource and returns
// the clientId the request acts as: the key's, when keys are configured
// (clientID, the body's, must then be empty or the same), else clientID as
// given. A resource name that is not valid is a *quota.ValidationError (400)
// before it is a 403. Errors: *quota.ValidationError, ErrPermissionDenied.
func authorize(r *http.Request, resource, clientID string) (string, error) {
	k, _ := r.Context().Value(clientKeyCtx{}).(*clientKey)
	if k == nil {
		return clientID, nil // no API keys configured
	}
	if err := quota.ValidateResourceName(resource); err != nil {
		return "", err
	}
	if !k.all && !k.resources[resource] {
		return "", denied(fmt.Sprintf("this API key may not use resource %q", resource))
	}
	if clientID != "" && clientID != k.clientID {
		return "", denied(fmt.Sprintf("clientId must be this API key's client %q, or empty", k.clientID))
	}
	return k.clientID, nil
}
