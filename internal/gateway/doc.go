// Package gateway serves Envoy's rate limit service protocol (gRPC
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from
// quota-center, so that a gateway (Envoy, Envoy AI Gateway, Istio) enforces
// durable quotas with no code in any service.
//
// A mapping file (Config, YAML in the shape of envoyproxy/ratelimit's
// configuration) turns a request's domain and descriptor entries into
// resources; each matched descriptor is charged its hits_addend through
// quota.Service.Charge (one atomic apply-and-finish per resource, all or
// nothing across the request, one ledger row per charged resource, merged
// with the rows of concurrent requests of the same client, resource and
// period by the ledger's group commit). The
// package holds the protocol, the mapping, its own metrics and the gRPC
// server (API key or mTLS, grpc.health.v1, reflection); the accounting
// stays in internal/quota. See docs/gateway.md.
package gateway
