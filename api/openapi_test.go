package api

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/quotacenter/quota-center/api/client"
)

// wantOperations is the HTTP API as specified: path → methods.
var wantOperations = map[string][]string{
	"/quota/apply":                                         {"POST"},
	"/quota/heartbeat":                                     {"POST"},
	"/quota/finish":                                        {"POST"},
	"/quota/status":                                        {"GET"},
	"/admin/policies":                                      {"GET"},
	"/admin/policies/{resourceName}":                       {"DELETE", "GET", "PATCH", "PUT"},
	"/admin/policies/{resourceName}/reset":                 {"POST"},
	"/admin/sessions":                                      {"GET"},
	"/admin/sessions/{sessionId}/finish":                   {"POST"},
	"/admin/usage":                                         {"GET"},
	"/admin/audit":                                         {"GET"},
	"/admin/policies/{resourceName}/lines":                 {"GET"},
	"/admin/policies/{resourceName}/lines/{line}":          {"DELETE", "PUT"},
	"/admin/policies/{resourceName}/pools":                 {"GET", "PUT"},
	"/admin/policies/{resourceName}/grants":                {"GET", "POST"},
	"/admin/policies/{resourceName}/grants/{id}":           {"DELETE"},
	"/admin/policies/{resourceName}/buffer/release":        {"POST"},
	"/admin/policies/{resourceName}/reclaims":              {"GET"},
	"/admin/policies/{resourceName}/reclaims/{id}/confirm": {"POST"},
	"/admin/policies/{resourceName}/reclaims/{id}/cancel":  {"POST"},
	"/admin/policies/{resourceName}/pool-events":           {"GET"},
	"/admin/reconcile":                                     {"POST"},
	"/healthz":                                             {"GET"},
	"/healthz/backends":                                    {"GET"},
	"/readyz":                                              {"GET"},
	"/metrics":                                             {"GET"},
}

const errorRef = "#/components/schemas/Error"

type doc map[string]any

func loadSpec(t *testing.T) doc {
	t.Helper()
	// Decode into a plain map: yaml.v3 would give nested mappings the
	// named type of the target.
	var raw map[string]any
	if err := yaml.Unmarshal(OpenAPI(), &raw); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	return doc(raw)
}

// m returns v as a map, failing the test when it is not one.
func m(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	mm, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want a mapping, got %T", what, v)
	}
	return mm
}

// resolve follows a local $ref ("#/a/b/c") until it reaches a non-ref node.
func (d doc) resolve(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	node := m(t, v, what)
	for i := 0; i < 10; i++ {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		if !strings.HasPrefix(ref, "#/") {
			t.Fatalf("%s: non-local $ref %q", what, ref)
		}
		var cur any = map[string]any(d)
		for _, part := range strings.Split(ref[2:], "/") {
			cm, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("%s: $ref %q does not resolve", what, ref)
			}
			if cur, ok = cm[part]; !ok {
				t.Fatalf("%s: $ref %q does not resolve (no %q)", what, ref, part)
			}
		}
		node = m(t, cur, ref)
	}
	t.Fatalf("%s: $ref chain too long", what)
	return nil
}

func TestOpenAPIVersionAndInfo(t *testing.T) {
	d := loadSpec(t)
	if v := d["openapi"]; v != "3.0.3" {
		t.Errorf("openapi = %v, want 3.0.3", v)
	}
	info := m(t, d["info"], "info")
	if info["title"] == nil || info["version"] == nil {
		t.Error("info needs title and version")
	}
}

func TestOperationsMatchesSpecifiedAPI(t *testing.T) {
	ops, err := Operations()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ops, wantOperations) {
		t.Errorf("Operations() = %v\nwant %v", ops, wantOperations)
	}
}

// TestEveryOperationDocumentsErrors checks every operation: it has an
// operationId, a 2xx response, and every 4xx response (and every 5xx one on
// the /quota and /admin endpoints) is JSON with the Error schema; the
// /quota and /admin operations have at least one 4xx.
func TestEveryOperationDocumentsErrors(t *testing.T) {
	d := loadSpec(t)
	paths := m(t, d["paths"], "paths")
	opIDs := map[string]bool{}
	for path, item := range paths {
		for method, opv := range m(t, item, path) {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			op := m(t, opv, where)
			id, _ := op["operationId"].(string)
			if id == "" || opIDs[id] {
				t.Errorf("%s: missing or duplicate operationId %q", where, id)
			}
			opIDs[id] = true
			responses := m(t, op["responses"], where+" responses")
			if len(responses) == 0 {
				t.Errorf("%s: no responses", where)
				continue
			}
			api := strings.HasPrefix(path, "/quota/") || strings.HasPrefix(path, "/admin/")
			var has2xx, has4xx bool
			for code, rv := range responses {
				if len(code) != 3 {
					t.Errorf("%s: response key %q is not a status code", where, code)
					continue
				}
				resp := d.resolve(t, rv, where+" "+code)
				if resp["description"] == nil {
					t.Errorf("%s %s: no description", where, code)
				}
				switch code[0] {
				case '2':
					has2xx = true
					if resp["content"] == nil {
						t.Errorf("%s %s: no content", where, code)
					}
					continue
				case '4':
					has4xx = true
				case '5':
					if !api {
						continue // /readyz 503 has its own body
					}
				}
				content := m(t, resp["content"], where+" "+code+" content")
				mt := m(t, content["application/json"], where+" "+code+" application/json")
				schema := m(t, mt["schema"], where+" "+code+" schema")
				if schema["$ref"] != errorRef {
					t.Errorf("%s %s: schema %v, want $ref %s", where, code, schema, errorRef)
				}
			}
			if !has2xx {
				t.Errorf("%s: no 2xx response", where)
			}
			if api && !has4xx {
				t.Errorf("%s: no 4xx response", where)
			}
			if api {
				if _, ok := op["security"]; !ok {
					t.Errorf("%s: no security requirement", where)
				}
			}
		}
	}
}

func TestQuotaExhaustedAndUnavailableHaveRetryAfter(t *testing.T) {
	d := loadSpec(t)
	apply := m(t, m(t, m(t, d["paths"], "paths")["/quota/apply"], "apply")["post"], "post")
	responses := m(t, apply["responses"], "responses")
	for _, code := range []string{"429", "503"} {
		resp := d.resolve(t, responses[code], "apply "+code)
		headers, _ := resp["headers"].(map[string]any)
		if _, ok := headers["Retry-After"]; !ok {
			t.Errorf("apply %s: no Retry-After header", code)
		}
	}
}

func TestSecuritySchemes(t *testing.T) {
	d := loadSpec(t)
	schemes := m(t, m(t, d["components"], "components")["securitySchemes"], "securitySchemes")
	bearer := m(t, schemes["bearerAuth"], "bearerAuth")
	if bearer["type"] != "http" || bearer["scheme"] != "bearer" {
		t.Errorf("bearerAuth = %v", bearer)
	}
	key := m(t, schemes["apiKeyAuth"], "apiKeyAuth")
	if key["type"] != "apiKey" || key["in"] != "header" || key["name"] != "X-API-Key" {
		t.Errorf("apiKeyAuth = %v", key)
	}
	// Client endpoints use the API key, admin endpoints the bearer token.
	paths := m(t, d["paths"], "paths")
	for path, item := range paths {
		want := ""
		switch {
		case strings.HasPrefix(path, "/quota/"):
			want = "apiKeyAuth"
		case strings.HasPrefix(path, "/admin/"):
			want = "bearerAuth"
		}
		for method, opv := range m(t, item, path) {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			sec, _ := m(t, opv, path)["security"].([]any)
			var names []string
			for _, req := range sec {
				for name := range m(t, req, path+" security") {
					names = append(names, name)
				}
			}
			if want == "" && len(names) != 0 {
				t.Errorf("%s %s: unexpected security %v", method, path, names)
			}
			if path == "/quota/status" && method == "get" {
				// An operator may read any status with an admin token.
				sort.Strings(names)
				if !reflect.DeepEqual(names, []string{"apiKeyAuth", "bearerAuth"}) {
					t.Errorf("%s %s: security %v, want apiKeyAuth and bearerAuth", method, path, names)
				}
				continue
			}
			if want != "" && !reflect.DeepEqual(names, []string{want}) {
				t.Errorf("%s %s: security %v, want %s", method, path, names, want)
			}
		}
	}
}

func TestErrorSchemaCodes(t *testing.T) {
	d := loadSpec(t)
	e := d.resolve(t, map[string]any{"$ref": errorRef}, "Error")
	req := toStrings(e["required"])
	sort.Strings(req)
	if !reflect.DeepEqual(req, []string{"code", "message", "success"}) {
		t.Errorf("Error.required = %v", req)
	}
	props := m(t, e["properties"], "Error.properties")
	codes := toStrings(m(t, props["code"], "Error.code")["enum"])
	want := []string{
		client.CodeInvalidArgument, client.CodeUnauthenticated, client.CodePermissionDenied,
		client.CodeResourceNotFound, client.CodeSessionNotFound, client.CodeNotFound,
		client.CodeMethodNotAllowed, client.CodeSessionNotActive, client.CodeSessionConflict, client.CodeReconcileSkipped,
		client.CodePayloadTooLarge, client.CodeRequestTimeout, client.CodeUnsupportedMediaType, client.CodeQuotaExhausted,
		client.CodeBackendUnavailable, client.CodeCircuitOpen, client.CodeInternal,
		client.CodePolicyInUse, client.CodeNotImplemented,
		client.CodeConflict,
	}
	sort.Strings(codes)
	sort.Strings(want)
	if !reflect.DeepEqual(codes, want) {
		t.Errorf("Error.code enum = %v\nwant %v", codes, want)
	}
	for _, p := range []string{"status", "remainingQuota", "nextResetAt", "reason"} {
		if _, ok := props[p]; !ok {
			t.Errorf("Error has no %q property", p)
		}
	}
}

// TestSchemasMatchClient checks that the JSON field names of the spec's
// schemas and of the Go client's types agree (success/code envelopes aside).
func TestSchemasMatchClient(t *testing.T) {
	d := loadSpec(t)
	for _, tc := range []struct {
		schema string
		typ    any
	}{
		{"ApplyRequest", client.ApplyRequest{}},
		{"ApplyResponse", client.ApplyResponse{}},
		{"Drawn", client.Drawn{}},
		{"HeartbeatRequest", client.HeartbeatRequest{}},
		{"HeartbeatResponse", client.HeartbeatResponse{}},
		{"FinishRequest", client.FinishRequest{}},
		{"FinishResponse", client.FinishResponse{}},
		{"StatusWithPools", client.QuotaStatus{}},
		{"PolicySpecWithPools", client.PolicySpec{}},
		{"PolicyWithPools", client.Policy{}},
		{"PoolSettings", client.PoolSettings{}},
		{"PoolStatus", client.PoolStatus{}},
		{"Grant", client.PoolGrant{}},
		{"VoidAnswer", client.VoidedGrant{}},
		{"Health", client.Health{}},
		{"SessionInfo", client.SessionInfo{}},
		{"UsageGroup", client.UsageGroup{}},
		{"UsageReport", client.UsageReport{}},
		{"ForceFinishRequest", client.ForceFinishRequest{}},
		{"ForceFinishResult", client.ForceFinishResult{}},
		{"PeriodReset", client.PeriodReset{}},
	} {
		s := d.flatten(t, d.resolve(t, map[string]any{"$ref": "#/components/schemas/" + tc.schema}, tc.schema), tc.schema)
		var specFields []string
		for name := range m(t, s["properties"], tc.schema+".properties") {
			if name != "success" && name != "code" {
				specFields = append(specFields, name)
			}
		}
		for _, r := range toStrings(s["required"]) {
			if _, ok := m(t, s["properties"], tc.schema)[r]; !ok {
				t.Errorf("%s: required %q is not a property", tc.schema, r)
			}
		}
		var goFields []string
		rt := reflect.TypeOf(tc.typ)
		for i := 0; i < rt.NumField(); i++ {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				goFields = append(goFields, name)
			}
		}
		sort.Strings(specFields)
		sort.Strings(goFields)
		if !reflect.DeepEqual(specFields, goFields) {
			t.Errorf("%s: spec fields %v, client fields %v", tc.schema, specFields, goFields)
		}
	}
}

// TestLineStatusMatchesClient: PoolStatus's lines (an inline schema) and
// client.LineStatus have the same fields.
func TestLineStatusMatchesClient(t *testing.T) {
	d := loadSpec(t)
	ps := d.resolve(t, map[string]any{"$ref": "#/components/schemas/PoolStatus"}, "PoolStatus")
	items := m(t, m(t, m(t, ps["properties"], "PoolStatus.properties")["lines"], "lines")["items"], "lines.items")
	var spec, got []string
	for name := range m(t, items["properties"], "lines.items.properties") {
		spec = append(spec, name)
	}
	rt := reflect.TypeOf(client.LineStatus{})
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		got = append(got, name)
	}
	sort.Strings(spec)
	sort.Strings(got)
	if !reflect.DeepEqual(spec, got) {
		t.Errorf("PoolStatus.lines: spec fields %v, client fields %v", spec, got)
	}
}

// flatten merges the properties and required lists of an allOf schema's
// members (each resolved) into one schema; other schemas are returned as
// they are.
func (d doc) flatten(t *testing.T, s map[string]any, what string) map[string]any {
	t.Helper()
	all, ok := s["allOf"].([]any)
	if !ok {
		return s
	}
	props := map[string]any{}
	var req []any
	for i, part := range all {
		p := d.flatten(t, d.resolve(t, part, fmt.Sprintf("%s.allOf[%d]", what, i)), what)
		if pp, ok := p["properties"].(map[string]any); ok {
			for k, v := range pp {
				props[k] = v
			}
		}
		if r, ok := p["required"].([]any); ok {
			req = append(req, r...)
		}
	}
	return map[string]any{"properties": props, "required": req}
}

func TestAllRefsResolve(t *testing.T) {
	d := loadSpec(t)
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch x := v.(type) {
		case map[string]any:
			if _, ok := x["$ref"]; ok {
				d.resolve(t, x, where)
			}
			for k, c := range x {
				walk(c, where+"/"+k)
			}
		case []any:
			for _, c := range x {
				walk(c, where)
			}
		}
	}
	walk(map[string]any(d), "#")
}

func TestOpenAPIReturnsCopy(t *testing.T) {
	a := OpenAPI()
	a[0] = 'X'
	if OpenAPI()[0] == 'X' {
		t.Error("OpenAPI() exposes the embedded bytes")
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
