package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestBasePathPrefix(t *testing.T) {
	f := newFake(t, 200, `{"policies":[]}`)
	c := newClient(t, f.srv.URL+"/qc/")
	if _, err := c.ListPolicies(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := f.last().Path; p != "/qc/admin/policies" {
		t.Errorf("path = %q", p)
	}
	if c.BaseURL() != f.srv.URL+"/qc" {
		t.Errorf("BaseURL = %q", c.BaseURL())
	}
}

func TestResourceNameEscaped(t *testing.T) {
	f := newFake(t, 200, policyJSON)
	c := newClient(t, f.srv.URL)
	if _, err := c.GetPolicy(context.Background(), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if p := f.last().EscapedPath; p != "/admin/policies/a%2Fb%20c" {
		t.Errorf("escaped path = %q, want one segment", p)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "http://h/?x=1", "://bad"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q): want error", u)
		}
	}
	if _, err := New("http://h", WithHTTPClient(nil)); err == nil {
		t.Error("WithHTTPClient(nil): want error")
	}
}

func TestDefaultTransportPooled(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	tr, ok := c.HTTPClient().Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport = %T", c.HTTPClient().Transport)
	}
	if tr.MaxIdleConnsPerHost < 200 {
		t.Errorf("MaxIdleConnsPerHost = %d, want >= 200", tr.MaxIdleConnsPerHost)
	}
	hc := &http.Client{}
	c = newClient(t, "http://127.0.0.1:1", WithHTTPClient(hc))
	if c.HTTPClient() != hc {
		t.Error("WithHTTPClient ignored")
	}
}

func TestTransportErrorAndTimeout(t *testing.T) {
	// Connection refused: not a *Error.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := newClient(t, url)
	_, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1})
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("err = %v", err)
	}

	// WithTimeout bounds a slow server.
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(block)
	c = newClient(t, slow.URL, WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err = c.Healthz(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}

	// A cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Healthz(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want canceled", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	f := newFake(t, 200, `{"sessionId":"s","grantedAmount":1,"remainingQuota":1,"leaseExpiresAt":"2024-05-01T10:05:00Z","heartbeatIntervalSeconds":1}`)
	c := newClient(t, f.srv.URL)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Apply(context.Background(), ApplyRequest{ResourceName: "r", ApplyAmount: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
