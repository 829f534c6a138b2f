package contract_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/quotacenter/quota-center/api"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// Credentials of the servers the tests start.
const (
	adminToken = "contract-admin-token-0123456789abcdef"
	apiKey     = "contract-api-key-0123456789abcdef"
	clientID   = "contract-client"
)

// loadSpec parses and validates api/openapi.yaml.
func loadSpec(tb testing.TB) *openapi3.T {
	tb.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
	if err != nil {
		tb.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		tb.Fatalf("openapi.yaml is not a valid OpenAPI 3 document: %v", err)
	}
	return doc
}

// checker sends requests to one server and holds every answer to the
// document: it validates the answer (status documented for the operation,
// headers, body against the schema) with openapi3filter, decodes it with
// the generated client's parser of the operation, and decodes the body
// once more strictly (no field the generated type lacks). It records which
// statuses each operation answered.
type checker struct {
	t      *testing.T
	s      *testenv.Server
	router routers.Router

	mu   sync.Mutex
	seen map[string]map[int]bool // operationId → statuses answered
}

func newChecker(t *testing.T, s *testenv.Server) *checker {
	t.Helper()
	doc := loadSpec(t)
	doc.Servers = openapi3.Servers{{URL: s.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	return &checker{t: t, s: s, router: router, seen: map[string]map[int]bool{}}
}

// startServer starts a server of mode with an admin token and an API key
// (bound to clientID and every resource), plus extra flags. It answers the
// server and a connection to its ledger that may write (the dev-mode
// ledger is a SQLite file of the test's; testenv's own is read-only).
func startServer(t *testing.T, mode testenv.Mode, extra ...string) (*testenv.Server, *sqlx.DB) {
	t.Helper()
	args := []string{
		"--admin-tokens", "contract:" + adminToken,
		"--api-keys", apiKey + "=" + clientID + ":*",
	}
	var path string
	if mode == testenv.Dev {
		path = filepath.Join(t.TempDir(), "ledger.db")
		args = append(args, "--dev-sqlite-path", path)
	}
	s := testenv.Start(t, mode, append(args, extra...)...)
	if mode != testenv.Dev {
		return s, s.Ledger
	}
	db, err := sqlx.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatalf("open the dev ledger: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return s, db
}

// req is one request: its body is JSON-encoded unless raw is set.
type req struct {
	method, path string
	body         any
	raw          []byte
	contentType  string // default application/json when there is a body
	noAuth       bool   // send no credentials
	header       map[string]string
}

// answer is a checked answer.
type answer struct {
	status int
	header http.Header
	body   []byte
	parsed any // the generated client's *<Operation>Response
}

// obj decodes the answer's body as a JSON object.
func (a answer) obj(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
	return m
}

// str returns a string field of the answer's body.
func (a answer) str(tb testing.TB, key string) string {
	tb.Helper()
	v, ok := a.obj(tb)[key].(string)
	if !ok {
		tb.Fatalf("answer %d %s: no string %q", a.status, a.body, key)
	}
	return v
}

// do sends r, checks the answer against the document and the generated
// client, and fails the test when want (if any) does not hold the status.
func (c *checker) do(r req, want ...int) answer {
	c.t.Helper()
	var body io.Reader
	switch {
	case r.raw != nil:
		body = bytes.NewReader(r.raw)
	case r.body != nil:
		b, err := json.Marshal(r.body)
		if err != nil {
			c.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	hr, err := http.NewRequest(r.method, c.s.URL+r.path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	if !r.noAuth {
		switch {
		case strings.HasPrefix(r.path, "/admin/"):
			hr.Header.Set("Authorization", "Bearer "+adminToken)
		case strings.HasPrefix(r.path, "/quota/"):
			hr.Header.Set("X-API-Key", apiKey)
		}
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(hr.WithContext(ctx))
	if err != nil {
		c.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		c.t.Fatalf("%s %s: read the answer: %v", r.method, r.path, err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: raw}
	what := fmt.Sprintf("%s %s -> %d %s", r.method, r.path, a.status, clip(raw))
	if len(want) > 0 && !contains(want, a.status) {
		c.t.Fatalf("%s: want status %v", what, want)
	}
	var errs []error
	a.parsed, errs = c.check(hr, a)
	for _, err := range errs {
		c.t.Errorf("%s: %v", what, err)
	}
	return a
}

// check validates a against the document and decodes it with the
// generated client; it answers the generated client's response value and
// every disagreement found.
func (c *checker) check(hr *http.Request, a answer) (any, []error) {
	route, params, err := c.router.FindRoute(hr)
	if err != nil {
		return nil, []error{fmt.Errorf("no operation of openapi.yaml: %w", err)}
	}
	op := route.Operation.OperationID
	c.mu.Lock()
	if c.seen[op] == nil {
		c.seen[op] = map[int]bool{}
	}
	c.seen[op][a.status] = true
	c.mu.Unlock()

	var errs []error
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: hr, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  a.status,
		Header:  a.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(a.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		errs = append(errs, fmt.Errorf("answer does not match openapi.yaml (%s): %w", op, err))
	}
	parsed, err := decode(op, a)
	if err != nil {
		errs = append(errs, err)
	}
	return parsed, errs
}

// decode runs the generated client's parser of op on a and checks that a
// JSON answer landed in its JSON<status> field, and that the body decodes
// into that field's type with no unknown field.
func decode(op string, a answer) (any, error) {
	parse, ok := parsers[op]
	if !ok {
		return nil, fmt.Errorf("no parser of the generated client for %s", op)
	}
	parsed, err := parse(&http.Response{
		StatusCode: a.status, Header: a.header, Body: io.NopCloser(bytes.NewReader(a.body)),
	})
	if err != nil {
		return nil, fmt.Errorf("the generated client cannot decode it: %w", err)
	}
	mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	if mt != "application/json" {
		return parsed, nil
	}
	field := reflect.ValueOf(parsed).Elem().FieldByName("JSON" + strconv.Itoa(a.status))
	if !field.IsValid() {
		return parsed, fmt.Errorf("the generated client has no JSON%d for %s", a.status, op)
	}
	if field.IsNil() {
		return parsed, fmt.Errorf("the generated client left JSON%d of %s empty", a.status, op)
	}
	strict := json.NewDecoder(bytes.NewReader(a.body))
	strict.DisallowUnknownFields()
	if err := strict.Decode(reflect.New(field.Type().Elem()).Interface()); err != nil {
		return parsed, fmt.Errorf("a field the document does not declare (%s, %s): %w", op, field.Type().Elem(), err)
	}
	return parsed, nil
}

// assertCovered fails unless every operation of the document answered a
// 2xx and, except the unauthenticated ops routes, a 4xx.
func (c *checker) assertCovered(doc *openapi3.T) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			got := c.seen[op.OperationID]
			var ok2, ok4 bool
			for st := range got {
				ok2 = ok2 || st/100 == 2
				ok4 = ok4 || st/100 == 4
			}
			open := !strings.HasPrefix(path, "/admin/") && !strings.HasPrefix(path, "/quota/")
			if !ok2 || (!ok4 && !open) {
				missing = append(missing, fmt.Sprintf("%s %s (%s): answered %v", method, path, op.OperationID, keys(got)))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.t.Errorf("operations without a 2xx and a 4xx answer checked:\n  %s", strings.Join(missing, "\n  "))
	}
}

func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
