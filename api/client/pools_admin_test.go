package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The pools' admin calls refuse an empty name or id and a negative limit
// before any request, and send the path, query and body the API expects.
func TestPoolsAdminCalls(t *testing.T) {
	var calls atomic.Int32
	var last string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		last = r.Method + " " + r.URL.RequestURI()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/confirm"):
			_, _ = w.Write([]byte(`{"success":true,"code":"SUCCESS","reclaim":{"id":"r1","state":"CONFIRMED"}}`))
		case strings.HasSuffix(r.URL.Path, "/pool-events"):
			_, _ = w.Write([]byte(`{"success":true,"code":"SUCCESS","events":[{"id":7,"kind":"MODE","mode":"REACTIVE"}]}`))
		default:
			_, _ = w.Write([]byte(`{"success":true,"code":"SUCCESS","lines":[{"businessLine":"core","tier":"CORE","dedicated":5}]}`))
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Pools":              func() error { _, err := c.Pools(ctx, ""); return err },
		"PutLine":            func() error { _, err := c.PutLine(ctx, "r", "", LineSpec{Tier: "CORE"}); return err },
		"DeleteLine":         func() error { _, err := c.DeleteLine(ctx, "r", ""); return err },
		"VoidGrant":          func() error { return c.VoidGrant(ctx, "r", "") },
		"VoidGrantReturning": func() error { _, err := c.VoidGrantReturning(ctx, "r", "", ""); return err },
		"ConfirmReclaim":     func() error { _, err := c.ConfirmReclaim(ctx, "r", "", true, ""); return err },
		"PoolEvents":         func() error { _, err := c.PoolEvents(ctx, "r", -1); return err },
		"Grants":             func() error { _, err := c.Grants(ctx, ""); return err },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d requests made for refused arguments", n)
	}
	cfg, err := c.PutLine(ctx, "res a", "core", LineSpec{Tier: "CORE", Weight: 2})
	if err != nil || last != "PUT /admin/policies/res%20a/lines/core" || len(cfg.Lines) != 1 || cfg.Lines[0].Dedicated != 5 {
		t.Fatalf("PutLine: %+v, %v, %s", cfg, err, last)
	}
	r, err := c.ConfirmReclaim(ctx, "res", "r1", true, "ok now")
	if err != nil || r.State != "CONFIRMED" || last != "POST /admin/policies/res/reclaims/r1/confirm?reason=ok+now" {
		t.Fatalf("ConfirmReclaim: %+v, %v, %s", r, err, last)
	}
	evs, err := c.PoolEvents(ctx, "res", 5)
	if err != nil || len(evs) != 1 || evs[0].Mode != "REACTIVE" || last != "GET /admin/policies/res/pool-events?limit=5" {
		t.Fatalf("PoolEvents: %+v, %v, %s", evs, err, last)
	}
}
