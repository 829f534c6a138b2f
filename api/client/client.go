package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds each call when WithTimeout is not given.
const DefaultTimeout = 10 * time.Second

// DefaultUserAgent is the User-Agent sent when WithUserAgent is not given.
const DefaultUserAgent = "quota-center-go-client/1"

// maxResponseBody bounds how much of a successful answer is read.
const maxResponseBody = 8 << 20

// Client calls one quota-center server. It is safe for concurrent use; create
// one per server and share it.
type Client struct {
	base       string // scheme://host[/prefix], no trailing slash
	hc         *http.Client
	apiKey     string
	adminToken string
	userAgent  string
	timeout    time.Duration
}

// Option configures a Client in New.
type Option func(*Client) error

// WithHTTPClient makes the Client send its requests with hc instead of its
// own pooled http.Client. hc must not be nil. The client's Timeout field is
// left as it is; WithTimeout still bounds each call through its context.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil *http.Client")
		}
		c.hc = hc
		return nil
	}
}

// WithAPIKey sends key as the X-API-Key header on the client endpoints
// (/quota/*), for servers that require one.
func WithAPIKey(key string) Option {
	return func(c *Client) error { c.apiKey = key; return nil }
}

// WithAdminToken sends token as "Authorization: Bearer <token>" on the admin
// endpoints (/admin/*), for servers that require one.
func WithAdminToken(token string) Option {
	return func(c *Client) error { c.adminToken = token; return nil }
}

// WithTimeout bounds every call (connect, request and reading the answer) to
// d, on top of the caller's context deadline. d <= 0 means no bound other
// than the context. The default is DefaultTimeout (10 s).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error { c.timeout = d; return nil }
}

// WithUserAgent sets the User-Agent header; the default is DefaultUserAgent.
func WithUserAgent(ua string) Option {
	return func(c *Client) error { c.userAgent = ua; return nil }
}

// New returns a Client for the server at baseURL, e.g.
// "http://127.0.0.1:8080" or "https://gw.example.com/quota-center" (a path
// prefix is kept). It fails when baseURL is not an absolute http(s) URL or
// an option is invalid.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("client: bad base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: bad base URL %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: bad base URL %q: must not have a query or fragment", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	c := &Client{
		base:      u.String(),
		userAgent: DefaultUserAgent,
		timeout:   DefaultTimeout,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport()}
	}
	return c, nil
}

// newTransport is a clone of http.DefaultTransport sized for a few hundred
// concurrent calls to one server, so that connections are reused rather than
// re-dialled (and left in TIME_WAIT) under load.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.MaxConnsPerHost = 0 // unlimited
	t.IdleConnTimeout = 90 * time.Second
	t.TLSHandshakeTimeout = 5 * time.Second
	t.ExpectContinueTimeout = time.Second
	t.ResponseHeaderTimeout = 0 // bounded by the per-call timeout instead
	return t
}

// BaseURL returns the normalized base URL the client calls.
func (c *Client) BaseURL() string { return c.base }

// HTTPClient returns the http.Client the Client sends with, for example to
// call CloseIdleConnections.
func (c *Client) HTTPClient() *http.Client { return c.hc }

// auth says which credential a request carries.
type auth int

const (
	authNone auth = iota
	authAPIKey
	authAdmin
	// authKeyOrAdmin sends the API key when the client has one, else the
	// admin token: GET /quota/status takes either.
	authKeyOrAdmin
)

// Apply reserves req.ApplyAmount of req.ResourceName and opens a session
// (POST /quota/apply). On 429 it returns a *Error matching ErrQuotaExhausted
// with RetryAfter (time to the next reset) and RemainingQuota set. It is
// safe to retry with the same req.SessionID.
func (c *Client) Apply(ctx context.Context, req ApplyRequest) (*ApplyResponse, error) {
	var out ApplyResponse
	if _, err := c.do(ctx, http.MethodPost, "/quota/apply", nil, req, authAPIKey, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Heartbeat extends the lease of a USING session (POST /quota/heartbeat).
// Errors: ErrSessionNotFound, ErrSessionNotActive (SessionStatus tells
// FINISHED or LEAKED), ErrResourceNotFound.
func (c *Client) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResponse, error) {
	var out HeartbeatResponse
	if _, err := c.do(ctx, http.MethodPost, "/quota/heartbeat", nil, req, authAPIKey, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Finish settles a session with its real usage and refunds the rest
// (POST /quota/finish). It is safe to retry with the same arguments; a
// repeat with another ActualUsedAmount fails with ErrSessionConflict.
func (c *Client) Finish(ctx context.Context, req FinishRequest) (*FinishResponse, error) {
	var out FinishResponse
	if _, err := c.do(ctx, http.MethodPost, "/quota/finish", nil, req, authAPIKey, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Status reads the balance of resource in its current period
// (GET /quota/status?resourceName=...). It authenticates with the API key
// (WithAPIKey) when the client has one, else with the admin token
// (WithAdminToken): the server lets an operator read any resource's status.
func (c *Client) Status(ctx context.Context, resource string) (*QuotaStatus, error) {
	var out QuotaStatus
	q := url.Values{"resourceName": {resource}}
	if _, err := c.do(ctx, http.MethodGet, "/quota/status", q, nil, authKeyOrAdmin, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutPolicy creates or replaces the policy of spec.ResourceName
// (PUT /admin/policies/{resourceName}). The returned Policy has Created set
// when the server created it (201) rather than updated it (200).
func (c *Client) PutPolicy(ctx context.Context, spec PolicySpec) (*Policy, error) {
	if spec.ResourceName == "" {
		return nil, errors.New("client: PutPolicy: empty ResourceName")
	}
	var out Policy
	status, err := c.do(ctx, http.MethodPut, "/admin/policies/"+url.PathEscape(spec.ResourceName), nil, spec, authAdmin, &out)
	if err != nil {
		return nil, err
	}
	out.Created = status == http.StatusCreated
	return &out, nil
}

// GetPolicy reads the policy of resource (GET /admin/policies/{resourceName}).
// Errors: ErrResourceNotFound.
func (c *Client) GetPolicy(ctx context.Context, resource string) (*Policy, error) {
	if resource == "" {
		return nil, errors.New("client: GetPolicy: empty resource name")
	}
	var out Policy
	if _, err := c.do(ctx, http.MethodGet, "/admin/policies/"+url.PathEscape(resource), nil, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPolicies returns every policy (GET /admin/policies).
func (c *Client) ListPolicies(ctx context.Context) ([]Policy, error) {
	var out struct {
		Policies []Policy `json:"policies"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/admin/policies", nil, nil, authAdmin, &out); err != nil {
		return nil, err
	}
	if out.Policies == nil {
		out.Policies = []Policy{}
	}
	return out.Policies, nil
}

// Healthz checks that the server process is alive (GET /healthz).
func (c *Client) Healthz(ctx context.Context) (*Health, error) {
	var out Health
	if _, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, authNone, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Readyz checks that the server can serve requests (GET /readyz): it is
// ready also with a backend down, and not ready only while shutting down.
// A server that is not ready gives a *Error with StatusCode 503 and Message
// "not ready".
func (c *Client) Readyz(ctx context.Context) (*Health, error) {
	var out Health
	if _, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, authNone, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// do sends one request and decodes a 2xx JSON answer into out. It returns
// the HTTP status. Non-2xx answers become a *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in any, a auth, out any) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("client: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if a == authKeyOrAdmin {
		a = authAdmin
		if c.apiKey != "" {
			a = authAPIKey
		}
	}
	switch a {
	case authAPIKey:
		if c.apiKey != "" {
			req.Header.Set("X-API-Key", c.apiKey)
		}
	case authAdmin:
		if c.adminToken != "" {
			req.Header.Set("Authorization", "Bearer "+c.adminToken)
		}
	}

	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err // *url.Error wrapping the cause; context errors match errors.Is
	}
	defer func() {
		// Drain a little so the connection can be reused, then close.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		resp.Body.Close()
	}()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A body cut short still gives a *Error with the status.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return resp.StatusCode, newError(resp.StatusCode, resp.Header, b)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("client: %s %s: reading response: %w", method, path, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("client: %s %s: decoding %d response: %w (body %q)", method, path, resp.StatusCode, err, snippet(b))
		}
	}
	return resp.StatusCode, nil
}
