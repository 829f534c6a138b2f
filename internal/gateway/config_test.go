package gateway

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// Every mistake in a mapping file is refused at start with the line and
// the field.
func TestConfigErrorsNameTheLineAndTheField(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"unknown field": {"domains:\n  - domain: d\n    descriptors:\n      - key: k\n        resourse: r\n",
			`line 5: domains[0].descriptors[0]: unknown field "resourse"`},
		"no domains":            {"response_headers: true\n", "line 1: domains: at least one domain is required"},
		"domain twice":          {"domains:\n  - {domain: d, descriptors: [{key: k, resource: r1}]}\n  - {domain: d, descriptors: [{key: k, resource: r1}]}\n", `line 3: domains[1].domain: "d" is also defined at line 2`},
		"no key":                {"domains:\n  - domain: d\n    descriptors:\n      - resource: r\n", "line 4: domains[0].descriptors[0].key: is required"},
		"leaf without resource": {"domains:\n  - domain: d\n    descriptors:\n      - key: k\n", "line 4: domains[0].descriptors[0]: a descriptor needs a resource"},
		"unbounded wildcard":    {"domains:\n  - domain: d\n    descriptors:\n      - key: user\n        resource: u-{value}\n", "line 4: domains[0].descriptors[0]: a per-value resource needs values (an allow-list) or max_resources"},
		"cap without template":  {"domains:\n  - domain: d\n    descriptors:\n      - {key: user, resource: 'u-{value}', max_resources: 3}\n", "line 4: domains[0].descriptors[0].template:"},
		"bad placeholder":       {"domains:\n  - domain: d\n    descriptors:\n      - {key: user, resource: 'u-{tenant}', values: [a]}\n", "placeholder {tenant} is neither {value} nor a key on the path (user)"},
		"bad resource name":     {"domains:\n  - domain: d\n    descriptors:\n      - {key: user, value: x, resource: Upper}\n", "line 4: domains[0].descriptors[0].resource: must be a resource name"},
		"bound on a fixed one":  {"domains:\n  - domain: d\n    descriptors:\n      - {key: user, value: x, resource: r, max_resources: 3}\n", "apply to a per-value resource"},
		"duplicate sibling":     {"domains:\n  - domain: d\n    descriptors:\n      - {key: k, value: v, resource: r}\n      - {key: k, value: v, resource: s}\n", `line 5: domains[0].descriptors[1]: key "k" value "v" is also defined at line 4`},
		"wrong type":            {"domains:\n  - domain: d\n    descriptors:\n      - {key: k, value: v, resource: r, shadow_mode: maybe}\n", "line 4: domains[0].descriptors[0].shadow_mode:"},
		"bad fail answer":       {"fail_closed_answer: deny\ndomains: []\n", `line 1: fail_closed_answer: "deny" is not one of unavailable, over_limit`},
		"nested error":          {"domains:\n  - domain: d\n    descriptors:\n      - key: a\n        descriptors:\n          - {key: b, resource: 'x-{a}-{value}', values: [q], template: Bad}\n", "line 6: domains[0].descriptors[0].descriptors[0].template: must be a resource name"},
	} {
		_, err := ParseConfig([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want it to contain %q", name, err, c.want)
		}
	}
}

// The lookup follows envoyproxy/ratelimit: exact value, then the longest
// prefix, then the key alone; nested entries walk the tree; per-value
// names take the entries' values.
func TestMatchPrefersExactThenPrefixThenAnyValue(t *testing.T) {
	c, err := ParseConfig([]byte(`
domains:
  - domain: d
    descriptors:
      - {key: model, value: gpt-4o, resource: exact}
      - {key: model, value: "gpt-*", resource: gpt}
      - {key: model, value: "gpt-4*", resource: gpt4}
      - {key: model, resource: 'm-{value}', values: [small, large]}
      - key: tenant
        descriptors:
          - {key: model, resource: 't-{tenant}-{value}', values: [small]}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domains["d"]
	for _, tc := range []struct {
		entries []Entry
		want    string
	}{
		{[]Entry{{"model", "gpt-4o"}}, "exact"},
		{[]Entry{{"model", "gpt-4-turbo"}}, "gpt4"},
		{[]Entry{{"model", "gpt-3"}}, "gpt"},
		{[]Entry{{"model", "small"}}, "m-small"},
		{[]Entry{{"tenant", "acme"}, {"model", "small"}}, "t-acme-small"},
		{[]Entry{{"tenant", "acme"}}, ""}, // no resource at that depth
		{[]Entry{{"other", "x"}}, ""},
	} {
		n := d.match(tc.entries)
		got := ""
		if n != nil {
			if got, err = n.resourceName(tc.entries); err != nil {
				t.Fatalf("%v: %v", tc.entries, err)
			}
		}
		if got != tc.want {
			t.Errorf("%v: %q, want %q", tc.entries, got, tc.want)
		}
	}
	if _, err := d.match([]Entry{{"model", "medium"}}).resourceName([]Entry{{"model", "medium"}}); !errors.Is(err, errRejected) {
		t.Fatalf("value outside the allow-list: %v", err)
	}
}

// The example mapping shipped in deploy/envoy parses.
func TestTheShippedMappingIsValid(t *testing.T) {
	b, err := os.ReadFile("../../deploy/envoy/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig(b); err != nil {
		t.Fatal(err)
	}
}
