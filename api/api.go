// Package api holds the public contract of the quota-center HTTP API: the
// OpenAPI 3.0.3 description in openapi.yaml (embedded here) and, in
// api/client, the Go client.
package api

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPI returns a copy of the embedded OpenAPI 3.0.3 document (YAML).
func OpenAPI() []byte { return slices.Clone(openapiYAML) }

// httpMethods are the OpenAPI 3 path-item keys that name operations.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// Operations returns the operations of the embedded OpenAPI document: each
// path (as written in the spec, e.g. "/admin/policies/{resourceName}") maps
// to its HTTP methods, upper-case ("GET", "PUT", …) and sorted. Path-item
// keys that are not methods (parameters, summary, …) are ignored.
func Operations() (map[string][]string, error) {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		return nil, fmt.Errorf("api: parse openapi.yaml: %w", err)
	}
	if len(doc.Paths) == 0 {
		return nil, fmt.Errorf("api: openapi.yaml has no paths")
	}
	ops := make(map[string][]string, len(doc.Paths))
	for path, item := range doc.Paths {
		var methods []string
		for key := range item {
			if slices.Contains(httpMethods, key) {
				methods = append(methods, strings.ToUpper(key))
			}
		}
		slices.Sort(methods)
		ops[path] = methods
	}
	return ops, nil
}
