package httpapi

// Fuzz tests of the request decoders (issue 3 §7). Each fuzzer drives the
// real handler (a quota.Service on miniredis and an in-memory SQLite ledger,
// one per fuzz process) with an arbitrary body and a Content-Type picked from
// fzContentTypes, and checks the answer against an independent strict
// reading of the body (fzParseObject in fuzz_json_oracle_test.go and the
// fzWant* oracles in fuzz_decode_test.go, which
// share no code with decode.go):
//
//   - never a 5xx, never a panic; every answer is one JSON object;
//   - every non-2xx answer has success=false and a known code that fits
//     its status;
//   - a body the oracle refuses is refused (400, or 413/415 for size and
//     Content-Type); a body it accepts is not refused as bad input, and a
//     2xx answer is consistent with it (grantedAmount ≤ applyAmount, …);
//   - a 4xx answer leaves GET /quota/status of the fuzzer's own resource
//     byte-identical: nothing changed.
//
// The seed corpus is under testdata/fuzz/<FuzzName>/; plain `go test` runs
// it. Fuzz with e.g.
//
//	go test -run='^$' -fuzz=FuzzDecodeApply -fuzztime=60s ./internal/httpapi/

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// Resources of the fuzz environment. Each fuzzer watches its own one.
const (
	fzApplyRes   = "fz-apply"  // COUNT 1000000, never resets; FuzzDecodeApply
	fzPutRes     = "fz-put"    // TOKENS 1000, never resets; FuzzPutPolicy (restored after every 2xx)
	fzFinishRes  = "fz-finish" // as a JSON string in FuzzDecodeFinish bodies: the current finish resource (fz-finish-g1, …)
	fzLiveID     = "fz-live"   // as a JSON string in FuzzDecodeFinish bodies: its current USING session (fz-live-1, …)
	fzLiveGrant  = 100         // grant of each live session
	fzFinishLim  = 1 << 40     // limit of each finish resource
	fzApplyLimit = 1_000_000
)

// fzKnownLuaPrecision: a known bug, found by FuzzDecodeFinish (corpus entry
// zz_crasher_used_past_2_53; also FuzzApplyFinishSequences in
// internal/quota). The Lua scripts read a period's charged through tonumber,
// a double, so once usedAmount passes 2^53−1 (by overages: two finishes
// with actualUsedAmount 2 and 9007199254740991 do it) status and finish
// answer it, and remainingQuota, rounded to an even number, while Redis
// and the ledger hold the exact sum. While true, a used amount past 2^53−1
// is compared within that rounding; set to false once the scripts return
// exact integers.
const fzKnownLuaPrecision = false

// fzNear compares a change of usedAmount with what the finish charged;
// used is usedAmount after it.
func fzNear(got, want, used int64) bool {
	if got == want {
		return true
	}
	tol := max(2, used>>51)
	return fzKnownLuaPrecision && used > quota.MaxAmount && got-want <= tol && want-got <= tol
}

// fzMaxAmount is 2^53−1 as a big.Int, for the oracles.
var fzMaxAmount = big.NewInt(1<<53 - 1)

// fzContentTypes are the Content-Type choices of the fuzzers (index: the
// fuzzed byte modulo the length) and whether decode must take them.
var fzContentTypes = []struct {
	ct string // "" sends none
	ok bool
}{
	{"", true},
	{"application/json", true},
	{"application/json; charset=utf-8", true},
	{"application/json; charset=UTF-8", true},
	{"application/json; charset=latin1", false},
	{"application/json; charset=utf-16", false},
	{"application/problem+json", true},
	{"APPLICATION/JSON", true},
	{" application/json ", true},
	{"text/plain", false},
	{"application/x-www-form-urlencoded", false},
	{"multipart/form-data; boundary=x", false},
	{"application/jsonl", false},
	{"application/json-patch+json", false},
	{"json", false},
	{"application/json; ==", false},
	{"text/json", false},
}

// fzEnv is the one server of a fuzz process: inputs run one after another
// on it, nothing is reset between them.
type fzEnv struct {
	mu  sync.Mutex
	h   http.Handler
	svc *quota.Service

	// FuzzDecodeFinish: the finish resource and its USING session the
	// placeholders stand for; a new session (and, once the resource is used
	// up, a new resource) replaces them when a finish settles them.
	finishGen, liveN int
	finishRes, live  string
}

var (
	fzOnce   sync.Once
	fzShared *fzEnv
	fzErr    error
)

// fuzzEnv returns the process's fuzz environment, building it on first use.
// Its miniredis and SQLite live as long as the process.
func fuzzEnv(tb testing.TB) *fzEnv {
	tb.Helper()
	fzOnce.Do(func() { fzShared, fzErr = newFzEnv() })
	if fzErr != nil {
		tb.Fatalf("fuzz environment: %v", fzErr)
	}
	return fzShared
}

func newFzEnv() (*fzEnv, error) {
	ctx := context.Background()
	mr, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	st, err := mysqlstore.OpenSQLite(ctx, ":memory:", mysqlstore.Options{BatchMaxWait: time.Microsecond})
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	svc := quota.NewService(redisstore.New(rdb), st, st, &period.Scheduler{}, quota.Options{})
	e := &fzEnv{h: New(Deps{Service: svc, Logger: zap.NewNop()}).Handler(), svc: svc}
	for _, p := range []quota.Policy{
		{ResourceName: fzApplyRes, QuotaType: quota.TypeCount, TotalLimit: fzApplyLimit},
		fzPutBaseline(),
	} {
		if _, _, err := svc.PutPolicy(ctx, p); err != nil {
			return nil, err
		}
	}
	if err := e.newFinishResource(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func fzPutBaseline() quota.Policy {
	return quota.Policy{ResourceName: fzPutRes, QuotaType: quota.TypeTokens, TotalLimit: 1000}
}

// newFinishResource makes the next finish resource and a live session on it.
func (e *fzEnv) newFinishResource(ctx context.Context) error {
	e.finishGen++
	e.finishRes = fmt.Sprintf("%s-g%d", fzFinishRes, e.finishGen)
	if _, _, err := e.svc.PutPolicy(ctx, quota.Policy{ResourceName: e.finishRes, QuotaType: quota.TypeTokens, TotalLimit: fzFinishLim}); err != nil {
		return err
	}
	return e.newLive(ctx)
}

// newLive applies for the next live session of the finish resource.
func (e *fzEnv) newLive(ctx context.Context) error {
	e.liveN++
	e.live = fmt.Sprintf("%s-%d", fzLiveID, e.liveN)
	res, err := e.svc.Apply(ctx, quota.ApplyRequest{ResourceName: e.finishRes, Amount: fzLiveGrant, SessionID: e.live})
	if err != nil {
		return err
	}
	if res.Refused() {
		return e.newFinishResource(ctx)
	}
	return nil
}

// fzAnswer is one HTTP answer, its body decoded with numbers kept exact.
type fzAnswer struct {
	status int
	raw    []byte
	body   map[string]any
}

func (a fzAnswer) String() string { return fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.raw)) }

// serve runs one request through the handler and checks what every answer
// must be: below 500, one JSON object, success=false and a fitting known
// code when not 2xx.
func (e *fzEnv) serve(t *testing.T, method, target, ctype string, body []byte) fzAnswer {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	a := fzAnswer{status: rec.Code, raw: rec.Body.Bytes()}
	if a.status >= 500 {
		t.Fatalf("%s %s answered %s", method, target, a)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q, want application/json: %s", method, target, ct, a)
	}
	dec := json.NewDecoder(bytes.NewReader(a.raw))
	dec.UseNumber()
	if err := dec.Decode(&a.body); err != nil || a.body == nil {
		t.Fatalf("%s %s: answer is not a JSON object (%v): %s", method, target, err, a)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("%s %s: data after the JSON answer: %s", method, target, a)
	}
	if a.status >= 300 {
		if a.body["success"] != false {
			t.Fatalf("%s %s: error answer without success=false: %s", method, target, a)
		}
		code, _ := a.body["code"].(string)
		if want := fzCodeStatus[code]; want == 0 || want != a.status {
			t.Fatalf("%s %s: code %q does not fit status %d (known codes: %v): %s", method, target, code, a.status, fzCodeStatus, a)
		}
		if msg, _ := a.body["message"].(string); msg == "" {
			t.Fatalf("%s %s: error answer without a message: %s", method, target, a)
		}
	}
	return a
}

// fzCodeStatus is every code a refusal may carry, with its status.
var fzCodeStatus = map[string]int{
	CodeInvalidArgument: 400, CodeUnauthenticated: 401, CodePermissionDenied: 403,
	CodeResourceNotFound: 404, CodeSessionNotFound: 404, CodeNotFound: 404,
	CodeMethodNotAllowed: 405, CodeSessionNotActive: 409, CodeSessionConflict: 409,
	CodePayloadTooLarge: 413, CodeUnsupportedMedia: 415, CodeQuotaExhausted: 429,
}

func (a fzAnswer) code() string { s, _ := a.body["code"].(string); return s }

func (a fzAnswer) num(t *testing.T, field string) int64 {
	t.Helper()
	n, ok := a.body[field].(json.Number)
	if !ok {
		t.Fatalf("answer field %s missing or not a number: %s", field, a)
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("answer field %s: %v: %s", field, err, a)
	}
	return v
}

// status reads GET /quota/status of a resource; it must answer 200.
func (e *fzEnv) status(t *testing.T, resource string) fzAnswer {
	t.Helper()
	a := e.serve(t, http.MethodGet, "/quota/status?resourceName="+url.QueryEscape(resource), "", nil)
	if a.status != http.StatusOK {
		t.Fatalf("status of %s: %s", resource, a)
	}
	return a
}

// fzUnchanged fails unless the resource's status is byte-identical to before.
func (e *fzEnv) fzUnchanged(t *testing.T, resource string, before fzAnswer, why fzAnswer) {
	t.Helper()
	if after := e.status(t, resource); !bytes.Equal(after.raw, before.raw) {
		t.Fatalf("refused with %s, yet the status of %s changed:\nbefore %s\nafter  %s", why, resource, before, after)
	}
}

// fzCheckRefusal checks a non-2xx answer against the oracle's verdict.
// verdict: fzBad (must be 400), fzGood (must not be 400/413/415), fzUnsure.
func fzCheckRefusal(t *testing.T, ctypeOK bool, body []byte, verdict fzVerdict, a fzAnswer) {
	t.Helper()
	switch {
	case len(body) > 1<<20:
		if a.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("a %d-byte body answered %s, want 413", len(body), a)
		}
	case !ctypeOK:
		if a.status != http.StatusUnsupportedMediaType {
			t.Fatalf("a refused Content-Type answered %s, want 415", a)
		}
	case verdict == fzBad:
		if a.status != http.StatusBadRequest {
			t.Fatalf("the oracle refuses this body, the server answered %s, want 400", a)
		}
	case verdict == fzGood:
		if a.status == http.StatusBadRequest || a.status == http.StatusUnsupportedMediaType || a.status == http.StatusRequestEntityTooLarge {
			t.Fatalf("the oracle takes this body, the server refused it as bad input: %s", a)
		}
	}
}

func fzContentType(b uint8) (string, bool) {
	c := fzContentTypes[int(b)%len(fzContentTypes)]
	return c.ct, c.ok
}
