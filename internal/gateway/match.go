package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Quota is what the gateway uses of quota.Service.
type Quota interface {
	Charge(ctx context.Context, req quota.ChargeRequest) (quota.ChargeResponse, error)
	Policy(ctx context.Context, resource string) (quota.Policy, error)
	Policies(ctx context.Context) ([]quota.Policy, error)
	PutPolicy(ctx context.Context, p quota.Policy) (quota.Policy, bool, error)
}

// Entry is one descriptor entry of a request.
type Entry struct{ Key, Value string }

// match finds the node a descriptor's entries lead to in a domain, or nil.
func (d *Domain) match(entries []Entry) *Descriptor {
	level := &d.children
	var node *Descriptor
	for _, e := range entries {
		node = level.find(e)
		if node == nil {
			return nil
		}
		level = &node.children
	}
	if node == nil || node.Resource == "" {
		return nil
	}
	return node
}

func (n *nodes) find(e Entry) *Descriptor {
	if d := n.exact[e.Key+"\x00"+e.Value]; d != nil {
		return d
	}
	for _, d := range n.prefixes {
		if d.Key == e.Key && strings.HasPrefix(e.Value, strings.TrimSuffix(d.Value, "*")) {
			return d
		}
	}
	return n.anyValue[e.Key]
}

// errRejected: a per-value resource outside its node's allow-list, or past
// its cap. The descriptor is answered OVER_LIMIT.
var errRejected = errors.New("value not allowed")

// badValueError: a value that cannot be part of a resource name.
type badValueError struct{ key, value string }

func (e *badValueError) Error() string {
	return fmt.Sprintf("descriptor entry %q has value %q, which cannot form a resource name: per-value resources take values of [a-z0-9_.-]", e.key, e.value)
}

// resourceName fills the node's resource with the request's values.
func (d *Descriptor) resourceName(entries []Entry) (string, error) {
	if !d.perValue {
		return d.Resource, nil
	}
	last := entries[len(entries)-1]
	if len(d.Values) > 0 && !contains(d.Values, last.Value) {
		return "", errRejected
	}
	var bad error
	name := placeholderRE.ReplaceAllStringFunc(d.Resource, func(m string) string {
		key := m[1 : len(m)-1]
		e := last
		if key != "value" {
			for _, x := range entries {
				if x.Key == key {
					e = x
				}
			}
		}
		if e.Value == "" || strings.Trim(e.Value, "abcdefghijklmnopqrstuvwxyz0123456789_.-") != "" {
			bad = &badValueError{e.Key, e.Value}
		}
		return e.Value
	})
	if bad != nil {
		return "", bad
	}
	if err := quota.ValidateResourceName(name); err != nil {
		return "", &badValueError{last.Key, last.Value}
	}
	return name, nil
}

// creator makes the per-value resources of the nodes with a template,
// within each node's cap. Across instances each counts the resources it
// listed at start plus those it saw or made, so n instances may make up
// to n−1 more than the cap between restarts: bounded, not exact
// (docs/gateway.md).
type creator struct {
	q      Quota
	mu     sync.Mutex
	known  map[*Descriptor]map[string]bool
	loaded bool               // load succeeded: known holds the existing resources
	cfg    *Config            // of the last load, for a lazy one
	loads  singleflight.Group // lazy loads, one at a time
}

func newCreator(q Quota) *creator {
	return &creator{q: q, known: map[*Descriptor]map[string]bool{}}
}

// load counts the existing resources of every bounded node. Until it
// succeeds, ensure calls it again first.
func (c *creator) load(ctx context.Context, cfg *Config) error {
	c.mu.Lock()
	c.cfg = cfg
	c.mu.Unlock()
	pols, err := c.q.Policies(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded = true
	cfg.walk(func(d *Descriptor) {
		if !d.perValue {
			return
		}
		set := map[string]bool{}
		for name := range c.known[d] { // made before a lazy load
			set[name] = true
		}
		for _, p := range pols {
			if d.pattern.MatchString(p.ResourceName) && p.ResourceName != d.Template {
				set[p.ResourceName] = true
			}
		}
		c.known[d] = set
	})
	return nil
}

// ensure makes sure a per-value resource exists: it is known, or it
// exists in the policy store, or it is made from the node's template
// while the node is under its cap. errRejected past the cap;
// quota.ErrResourceNotFound for a node without a template.
func (c *creator) ensure(ctx context.Context, d *Descriptor, name string) error {
	if err := c.loadIfNeeded(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	if c.known[d] == nil {
		c.known[d] = map[string]bool{}
	}
	if c.known[d][name] {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	_, err := c.q.Policy(ctx, name)
	if err == nil {
		c.remember(d, name)
		return nil
	}
	if !errors.Is(err, quota.ErrResourceNotFound) || d.Template == "" {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known[d][name] {
		return nil // made by a concurrent call meanwhile
	}
	if d.MaxResources > 0 && len(c.known[d]) >= d.MaxResources {
		return errRejected
	}
	tpl, err := c.q.Policy(ctx, d.Template)
	if err != nil {
		return fmt.Errorf("template %s of line %d: %w", d.Template, d.Line, err)
	}
	tpl.ResourceName = name
	if _, _, err := c.q.PutPolicy(quota.WithActor(ctx, "gateway"), tpl); err != nil {
		return fmt.Errorf("create %s from template %s: %w", name, d.Template, err)
	}
	c.known[d][name] = true
	return nil
}

// loadIfNeeded runs load when no load succeeded yet (the policy store was
// down at Start): a cap is only checked against a full count. Concurrent
// callers share one load.
func (c *creator) loadIfNeeded(ctx context.Context) error {
	c.mu.Lock()
	loaded, cfg := c.loaded, c.cfg
	c.mu.Unlock()
	if loaded || cfg == nil {
		return nil
	}
	_, err, _ := c.loads.Do("load", func() (any, error) { return nil, c.load(ctx, cfg) })
	if err != nil {
		return fmt.Errorf("count the existing resources: %w", err)
	}
	return nil
}

func (c *creator) remember(d *Descriptor, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known[d][name] = true
}

// walk calls fn on every node of every domain.
func (c *Config) walk(fn func(*Descriptor)) {
	var visit func(n *nodes)
	visit = func(n *nodes) {
		all := make([]*Descriptor, 0, len(n.exact)+len(n.prefixes)+len(n.anyValue))
		for _, d := range n.exact {
			all = append(all, d)
		}
		all = append(all, n.prefixes...)
		for _, d := range n.anyValue {
			all = append(all, d)
		}
		for _, d := range all {
			fn(d)
			visit(&d.children)
		}
	}
	for _, dom := range c.Domains {
		visit(&dom.children)
	}
}
