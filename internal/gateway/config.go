package gateway

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Config is a parsed, validated mapping file (QC_GATEWAY_CONFIG). Its shape
// follows envoyproxy/ratelimit's configuration, with a resource in place of
// each rate_limit:
//
//	response_headers: true          # x-ratelimit-limit/-remaining/-reset
//	fail_closed_answer: unavailable # or over_limit
//	domains:
//	  - domain: llm
//	    descriptors:
//	      - key: tenant             # no value: one resource per tenant
//	        resource: tokens.{value}
//	        template: tokens-default # policy copied for a new tenant
//	        max_resources: 1000      # or values: [acme, globex]
//	        usage: true              # a token budget (see Descriptor.Usage)
//	      - key: generic_key
//	        value: chat
//	        resource: chat-calls
//	        shadow_mode: true
type Config struct {
	// Path is the file it was read from ("" when parsed from bytes).
	Path string
	// Headers, when Enabled, adds the response headers envoyproxy/ratelimit
	// adds with LIMIT_RESPONSE_HEADERS_ENABLED, from the descriptor closest
	// to its limit.
	Headers Headers
	// FailClosedAnswer is what a failMode CLOSED policy answers while the
	// stores cannot decide: "unavailable" (default; gRPC UNAVAILABLE, and
	// Envoy denies only with failure_mode_deny: true) or "over_limit" (an
	// OVER_LIMIT answer, denied whatever Envoy's failure_mode_deny).
	FailClosedAnswer string
	Domains          map[string]*Domain
}

// Headers names the rate limit response headers.
type Headers struct {
	Enabled   bool
	Limit     string // default x-ratelimit-limit
	Remaining string // default x-ratelimit-remaining
	Reset     string // default x-ratelimit-reset (seconds until the period resets)
}

// Domain is one rate limit domain: the tree of its descriptors.
type Domain struct {
	Name     string
	Line     int
	children nodes
}

// Descriptor is one node of a domain's tree: a descriptor entry's key and,
// optionally, value. A request's descriptor matches the node its entries
// lead to, level by level, as in envoyproxy/ratelimit: an exact value
// first, then the longest "prefix*" value, then the node without a value
// (any value). A node with a Resource charges it.
type Descriptor struct {
	Key   string
	Value string // "" any value; "p*" any value starting with p
	Line  int
	// Resource names the resource charged. Placeholders {value} (this
	// entry's value) and {KEY} (the value of the entry KEY on the path)
	// make one resource per value; such a node is bounded by Values (an
	// allow-list) or MaxResources (a cap on the resources it creates).
	Resource string
	// Template is the resource whose policy is copied (limit, reset,
	// failMode, type) for a per-value resource that does not exist yet;
	// without it, per-value resources must be created by an operator.
	Template     string
	MaxResources int
	Values       []string
	// Shadow: charged and logged, but never answered OVER_LIMIT
	// (envoyproxy/ratelimit's shadow_mode).
	Shadow bool
	// Usage: the hits are usage that already happened (Envoy AI Gateway's
	// token count on the response): never refused, counted as overage past
	// the limit; hits_addend 0 asks whether anything is left.
	Usage bool

	children nodes
	pattern  *regexp.Regexp // names a per-value resource of this node may have
	perValue bool
}

type nodes struct {
	exact    map[string]*Descriptor // key "\x00" value
	prefixes []*Descriptor          // longest prefix first
	anyValue map[string]*Descriptor // by key
}

// LoadConfig reads and validates a mapping file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the file (QC_GATEWAY_CONFIG)
	if err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("gateway config %s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// ParseConfig parses and validates a mapping. Errors name the line and the
// field.
func ParseConfig(b []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("empty file: want a mapping with domains")
	}
	root := doc.Content[0]
	c := &Config{Domains: map[string]*Domain{}, FailClosedAnswer: "unavailable",
		Headers: Headers{Limit: "x-ratelimit-limit", Remaining: "x-ratelimit-remaining", Reset: "x-ratelimit-reset"}}
	err := fields(root, "top level", map[string]func(*yaml.Node) error{
		"response_headers": func(n *yaml.Node) error { return decode(n, "response_headers", &c.Headers.Enabled) },
		"limit_header":     func(n *yaml.Node) error { return headerName(n, "limit_header", &c.Headers.Limit) },
		"remaining_header": func(n *yaml.Node) error { return headerName(n, "remaining_header", &c.Headers.Remaining) },
		"reset_header":     func(n *yaml.Node) error { return headerName(n, "reset_header", &c.Headers.Reset) },
		"fail_closed_answer": func(n *yaml.Node) error {
			return oneOf(n, "fail_closed_answer", &c.FailClosedAnswer, "unavailable", "over_limit")
		},
		"domains": func(n *yaml.Node) error { return c.parseDomains(n) },
	})
	if err != nil {
		return nil, err
	}
	if len(c.Domains) == 0 {
		return nil, at(root, "domains: at least one domain is required")
	}
	return c, nil
}

func (c *Config) parseDomains(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return at(n, "domains: want a list")
	}
	for i, dn := range n.Content {
		d := &Domain{Line: dn.Line}
		where := fmt.Sprintf("domains[%d]", i)
		var list *yaml.Node
		err := fields(dn, where, map[string]func(*yaml.Node) error{
			"domain":      func(v *yaml.Node) error { return decode(v, where+".domain", &d.Name) },
			"descriptors": func(v *yaml.Node) error { list = v; return nil },
		})
		if err != nil {
			return err
		}
		if d.Name == "" {
			return at(dn, where+".domain: is required")
		}
		if prev := c.Domains[d.Name]; prev != nil {
			return at(dn, fmt.Sprintf("%s.domain: %q is also defined at line %d", where, d.Name, prev.Line))
		}
		if list == nil {
			return at(dn, where+".descriptors: at least one descriptor is required")
		}
		if err := parseDescriptors(list, where+".descriptors", nil, &d.children); err != nil {
			return err
		}
		c.Domains[d.Name] = d
	}
	return nil
}

// keyRE is what a descriptor key may be: what Envoy's actions produce.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// placeholderRE finds {name} in a resource template.
var placeholderRE = regexp.MustCompile(`\{([^{}]*)\}`)

func parseDescriptors(n *yaml.Node, where string, path []string, into *nodes) error {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return at(n, where+": want a non-empty list")
	}
	into.exact, into.anyValue = map[string]*Descriptor{}, map[string]*Descriptor{}
	for i, dn := range n.Content {
		d, list, err := parseDescriptor(dn, fmt.Sprintf("%s[%d]", where, i), path)
		if err != nil {
			return err
		}
		w := fmt.Sprintf("%s[%d]", where, i)
		if list != nil {
			if err := parseDescriptors(list, w+".descriptors", append(path, d.Key), &d.children); err != nil {
				return err
			}
		}
		if d.Resource == "" && list == nil {
			return at(dn, w+": a descriptor needs a resource or nested descriptors")
		}
		var prev *Descriptor
		switch {
		case d.Value == "":
			prev = into.anyValue[d.Key]
			into.anyValue[d.Key] = d
		case strings.HasSuffix(d.Value, "*"):
			for _, p := range into.prefixes {
				if p.Key == d.Key && p.Value == d.Value {
					prev = p
				}
			}
			into.prefixes = append(into.prefixes, d)
		default:
			prev = into.exact[d.Key+"\x00"+d.Value]
			into.exact[d.Key+"\x00"+d.Value] = d
		}
		if prev != nil {
			return at(dn, fmt.Sprintf("%s: key %q value %q is also defined at line %d", w, d.Key, d.Value, prev.Line))
		}
	}
	sort.SliceStable(into.prefixes, func(i, j int) bool { return len(into.prefixes[i].Value) > len(into.prefixes[j].Value) })
	return nil
}

func parseDescriptor(dn *yaml.Node, w string, path []string) (*Descriptor, *yaml.Node, error) {
	d := &Descriptor{Line: dn.Line}
	var list *yaml.Node
	err := fields(dn, w, map[string]func(*yaml.Node) error{
		"key":           func(v *yaml.Node) error { return decode(v, w+".key", &d.Key) },
		"value":         func(v *yaml.Node) error { return decode(v, w+".value", &d.Value) },
		"resource":      func(v *yaml.Node) error { return decode(v, w+".resource", &d.Resource) },
		"template":      func(v *yaml.Node) error { return decode(v, w+".template", &d.Template) },
		"max_resources": func(v *yaml.Node) error { return decode(v, w+".max_resources", &d.MaxResources) },
		"values":        func(v *yaml.Node) error { return decode(v, w+".values", &d.Values) },
		"shadow_mode":   func(v *yaml.Node) error { return decode(v, w+".shadow_mode", &d.Shadow) },
		"usage":         func(v *yaml.Node) error { return decode(v, w+".usage", &d.Usage) },
		"descriptors":   func(v *yaml.Node) error { list = v; return nil },
	})
	if err != nil {
		return nil, nil, err
	}
	if !keyRE.MatchString(d.Key) {
		return nil, nil, at(dn, w+".key: is required, 1 to 128 characters of [A-Za-z0-9_.:-]")
	}
	if d.Value == "*" {
		return nil, nil, at(dn, w+`.value: "*" alone matches any value: leave value out instead`)
	}
	if err := d.validateResource(dn, w, append(path, d.Key)); err != nil {
		return nil, nil, err
	}
	return d, list, nil
}

// validateResource checks the resource, its placeholders and its bound.
func (d *Descriptor) validateResource(dn *yaml.Node, w string, path []string) error {
	bounded := d.MaxResources != 0 || len(d.Values) > 0 || d.Template != ""
	if d.Resource == "" {
		if bounded || d.Shadow || d.Usage {
			return at(dn, w+": template, max_resources, values, shadow_mode and usage need a resource")
		}
		return nil
	}
	literal := placeholderRE.ReplaceAllStringFunc(d.Resource, func(string) string { return "x" })
	if err := quota.ValidateResourceName(literal); err != nil || strings.ContainsAny(literal, "{}") {
		return at(dn, w+".resource: must be a resource name ([a-z0-9_.-], up to 64) with optional {value} or {KEY} placeholders")
	}
	var re strings.Builder
	re.WriteString("^")
	last := 0
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(d.Resource, -1) {
		name := d.Resource[m[2]:m[3]]
		if name != "value" && !contains(path, name) {
			return at(dn, fmt.Sprintf("%s.resource: placeholder {%s} is neither {value} nor a key on the path (%s)", w, name, strings.Join(path, ", ")))
		}
		re.WriteString(regexp.QuoteMeta(d.Resource[last:m[0]]) + "[a-z0-9_.-]+")
		last = m[1]
		d.perValue = true
	}
	re.WriteString(regexp.QuoteMeta(d.Resource[last:]) + "$")
	d.pattern = regexp.MustCompile(re.String())
	switch {
	case d.perValue && d.MaxResources == 0 && len(d.Values) == 0:
		return at(dn, w+": a per-value resource needs values (an allow-list) or max_resources (a cap), so that callers cannot create resources without limit")
	case !d.perValue && bounded:
		return at(dn, w+": template, max_resources and values apply to a per-value resource ({value} in resource)")
	case d.MaxResources < 0 || d.MaxResources > 1_000_000:
		return at(dn, w+".max_resources: must be 1 to 1000000")
	case d.MaxResources > 0 && d.Template == "":
		return at(dn, w+".template: max_resources caps the resources created from a template: name the template resource")
	}
	if d.Template != "" {
		if err := quota.ValidateResourceName(d.Template); err != nil {
			return at(dn, w+".template: must be a resource name")
		}
	}
	for _, v := range d.Values {
		if v == "" {
			return at(dn, w+".values: empty value")
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// fields walks a mapping node, calling the handler of each known key; an
// unknown key is an error naming its line and the known ones.
func fields(n *yaml.Node, where string, handlers map[string]func(*yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return at(n, where+": want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := handlers[k.Value]
		if !ok {
			known := make([]string, 0, len(handlers))
			for name := range handlers {
				known = append(known, name)
			}
			sort.Strings(known)
			return at(k, fmt.Sprintf("%s: unknown field %q (known: %s)", where, k.Value, strings.Join(known, ", ")))
		}
		if seen[k.Value] {
			return at(k, fmt.Sprintf("%s: field %q given twice", where, k.Value))
		}
		seen[k.Value] = true
		if err := h(v); err != nil {
			return err
		}
	}
	return nil
}

func decode(n *yaml.Node, field string, v any) error {
	if err := n.Decode(v); err != nil {
		return at(n, fmt.Sprintf("%s: %v", field, strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	return nil
}

var headerRE = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

func headerName(n *yaml.Node, field string, v *string) error {
	if err := decode(n, field, v); err != nil {
		return err
	}
	if !headerRE.MatchString(*v) {
		return at(n, field+": must be a lower-case header name of [a-z0-9-]")
	}
	return nil
}

func oneOf(n *yaml.Node, field string, v *string, allowed ...string) error {
	if err := decode(n, field, v); err != nil {
		return err
	}
	if !contains(allowed, *v) {
		return at(n, fmt.Sprintf("%s: %q is not one of %s", field, *v, strings.Join(allowed, ", ")))
	}
	return nil
}

// at prefixes a message with the node's line.
func at(n *yaml.Node, msg string) error { return fmt.Errorf("line %d: %s", n.Line, msg) }
