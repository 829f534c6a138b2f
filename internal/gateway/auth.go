package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// APIKeyHeader is the gRPC metadata key of the client API key, the same
// key (lower-case, as gRPC metadata is) as the HTTP side's X-API-Key. In
// Envoy, the ratelimit filter's grpc_service sets it with
// initial_metadata.
const APIKeyHeader = "x-api-key"

// Key is one client API key (QC_API_KEYS) and the resources it may charge.
type Key struct {
	Key          string
	ClientID     string
	Resources    []string // unless AllResources
	AllResources bool
}

// Keys holds API keys as SHA-256 digests, as the HTTP side does: no
// plaintext kept, a lookup's time says nothing about a key.
type Keys struct {
	byHash map[[sha256.Size]byte]*clientKey
}

type clientKey struct {
	clientID  string
	all       bool
	resources map[string]bool
}

// NewKeys indexes keys; with none it returns nil (no key asked).
func NewKeys(keys []Key) *Keys {
	if len(keys) == 0 {
		return nil
	}
	k := &Keys{byHash: make(map[[sha256.Size]byte]*clientKey, len(keys))}
	for _, x := range keys {
		ck := &clientKey{clientID: x.ClientID, all: x.AllResources, resources: map[string]bool{}}
		for _, r := range x.Resources {
			ck.resources[r] = true
		}
		k.byHash[sha256.Sum256([]byte(x.Key))] = ck
	}
	return k
}

// authenticate reads the one x-api-key of the call: UNAUTHENTICATED when
// it is missing or unknown. Without keys every call goes through (nil).
func (k *Keys) authenticate(ctx context.Context) (*clientKey, error) {
	if k == nil {
		return nil, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(APIKeyHeader)
	switch {
	case len(vals) == 0 || vals[0] == "":
		return nil, status.Error(codes.Unauthenticated, "missing API key: send the x-api-key metadata (Envoy: grpc_service.initial_metadata)")
	case len(vals) > 1:
		return nil, status.Error(codes.Unauthenticated, "send one x-api-key metadata value")
	}
	ck := k.byHash[sha256.Sum256([]byte(vals[0]))]
	if ck == nil {
		return nil, status.Error(codes.Unauthenticated, "invalid API key")
	}
	return ck, nil
}

// client is the key's client id ("" without keys).
func (c *clientKey) client() string {
	if c == nil {
		return ""
	}
	return c.clientID
}

// authorize says whether the key may charge resource: PERMISSION_DENIED
// otherwise, naming the resource (not the key).
func (c *clientKey) authorize(resource string) error {
	if c == nil || c.all || c.resources[resource] {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "the API key of client %s may not use resource %s", c.clientID, resource)
}

// TLSFiles are the PEM files of the gRPC listener's TLS (QC_GRPC_TLS_*).
// ClientCA, when set, makes it mTLS: a client certificate signed by it is
// required.
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// Credentials loads the files into server transport credentials; nil, nil
// when no Cert is set (plaintext).
func (f TLSFiles) Credentials() (credentials.TransportCredentials, error) {
	if f.Cert == "" && f.Key == "" && f.ClientCA == "" {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("grpc tls: set both the certificate and the key")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("grpc tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("grpc tls client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("grpc tls client CA %s: no PEM certificate in it", f.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}
