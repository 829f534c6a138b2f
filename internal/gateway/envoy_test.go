package gateway

import (
	"encoding/json"
	"os"
	"testing"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
)

// validator is what protoc-gen-validate generates on Envoy's messages.
type validator interface{ ValidateAll() error }

// deploy/envoy/envoy.yaml is a valid Envoy bootstrap (strict: an unknown
// field fails), with every typed config valid too, and its ratelimit filter
// asks a domain of the shipped mapping at a cluster the file defines.
func TestTheExampleEnvoyConfigIsAValidBootstrap(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrap.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, &bs); err != nil {
		t.Fatalf("envoy.yaml is not a bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	clusters := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
		for _, opt := range c.GetTypedExtensionProtocolOptions() {
			validAny(t, opt.MessageName(), mustUnpack(t, opt))
		}
	}
	mapping, err := os.ReadFile("../../deploy/envoy/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(mapping)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				m := mustUnpack(t, f.GetTypedConfig())
				validAny(t, f.GetName(), m)
				h, ok := m.(*hcm.HttpConnectionManager)
				if !ok {
					continue
				}
				for _, hf := range h.GetHttpFilters() {
					fm := mustUnpack(t, hf.GetTypedConfig())
					validAny(t, hf.GetName(), fm)
					if rl, ok := fm.(*ratelimitfilter.RateLimit); ok {
						found = true
						if cfg.Domains[rl.GetDomain()] == nil {
							t.Errorf("the ratelimit filter asks domain %q, which gateway.yaml does not map", rl.GetDomain())
						}
						if c := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); !clusters[c] {
							t.Errorf("the ratelimit filter's cluster %q is not defined", c)
						}
						// Envoy's own x-ratelimit-* headers (from the statuses'
						// current_limit, limit_remaining, duration_until_reset) and
						// the mapping's response_headers would each send them: every
						// header twice (issue 22 §9). One of the two only.
						if rl.GetEnableXRatelimitHeaders() != ratelimitfilter.RateLimit_OFF && cfg.Headers.Enabled {
							t.Errorf("envoy.yaml sets enable_x_ratelimit_headers %s and gateway.yaml response_headers: true: "+
								"each x-ratelimit-* header would be sent twice", rl.GetEnableXRatelimitHeaders())
						}
					}
				}
			}
		}
	}
	if !found {
		t.Fatal("no envoy.filters.http.ratelimit in envoy.yaml")
	}
}

func mustUnpack(t *testing.T, a interface{ UnmarshalNew() (proto.Message, error) }) proto.Message {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("typed config: %v", err)
	}
	return m
}

func validAny(t *testing.T, name any, m proto.Message) {
	t.Helper()
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%v: %v", name, err)
		}
	}
}
