package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotacenter/quota-center/api"
	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
)

// operations maps "METHOD path" to true, HEAD and OPTIONS aside.
type operations map[string]bool

func (o operations) add(method, path string) {
	if method != http.MethodHead && method != http.MethodOptions {
		o[method+" "+path] = true
	}
}

// missingFrom lists the operations of o that other lacks, sorted.
func (o operations) missingFrom(other operations) []string {
	var out []string
	for op := range o {
		if !other[op] {
			out = append(out, op)
		}
	}
	sort.Strings(out)
	return out
}

func TestRouterMatchesTheOpenAPIDocument(t *testing.T) {
	// Every optional dependency is set, so that every route is mounted.
	srv := httpapi.New(httpapi.Deps{
		Gatherer:  prometheus.NewRegistry(),
		Reconcile: func(context.Context, string) (any, int, error) { return nil, 0, nil },
		Pools:     httpapi.PoolAdmin{Lines: &admin.Pools{}, Grants: &admin.Pools{}, Reclaims: &admin.Pools{}},
	})
	routed := operations{}
	err := chi.Walk(srv.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed.add(method, route)
		return nil
	})
	if err != nil {
		t.Fatalf("walk routes: %v", err)
	}
	ops, err := api.Operations()
	if err != nil {
		t.Fatal(err)
	}
	documented := operations{}
	for path, methods := range ops {
		for _, m := range methods {
			documented.add(m, path)
		}
	}
	if len(routed) == 0 || len(documented) == 0 {
		t.Fatalf("nothing to compare: %d routes, %d documented operations", len(routed), len(documented))
	}

	t.Run("every route is documented in openapi.yaml", func(t *testing.T) {
		if missing := routed.missingFrom(documented); len(missing) > 0 {
			t.Errorf("routed but not documented: %v", missing)
		}
	})
	t.Run("every documented operation is routed", func(t *testing.T) {
		if missing := documented.missingFrom(routed); len(missing) > 0 {
			t.Errorf("documented but not routed: %v", missing)
		}
	})
	t.Run("the client API operations are among them", func(t *testing.T) {
		for _, op := range []string{"POST /quota/apply", "POST /quota/heartbeat", "POST /quota/finish", "GET /quota/status",
			"PUT /admin/policies/{resourceName}", "GET /metrics"} {
			if !routed[op] || !documented[op] {
				t.Errorf("%s: routed %v, documented %v", op, routed[op], documented[op])
			}
		}
		if !slices.Contains(ops["/admin/policies/{resourceName}"], http.MethodGet) {
			t.Errorf("GET /admin/policies/{resourceName} is not documented")
		}
	})
}
