package quota

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// field is the field of a *ValidationError, or "" for any other error.
func field(err error) string {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Field
	}
	return ""
}

// Amounts are integers of 1 … 2^53−1 (0 too where zero is allowed): the
// largest integer JSON clients and Lua represent exactly.
func TestValidateAmountAcceptsExactlyTheRange(t *testing.T) {
	for _, c := range []struct {
		v      int64
		zeroOK bool
		ok     bool
	}{
		{-1, true, false}, {0, true, true}, {0, false, false}, {1, false, true},
		{MaxAmount, false, true}, {MaxAmount + 1, true, false}, {MaxAmount + 1, false, false},
	} {
		err := ValidateAmount("n", c.v, c.zeroOK)
		if (err == nil) != c.ok || (err != nil && field(err) != "n") {
			t.Errorf("ValidateAmount(%d, zeroOK=%v) = %v, want ok=%v", c.v, c.zeroOK, err, c.ok)
		}
	}
	if MaxAmount != 9007199254740991 {
		t.Fatalf("MaxAmount = %d, want 2^53-1", MaxAmount)
	}
}

func TestValidateNamesAndIDs(t *testing.T) {
	for name, ok := range map[string]bool{
		"": false, "a": true, "gpt-4o_mini.v2": true, strings.Repeat("a", 64): true, strings.Repeat("a", 65): false,
		"A": false, ".": false, "..": false, "_-.": false, "a b": false,
	} {
		if err := ValidateResourceName(name); (err == nil) != ok || (!ok && field(err) != "resourceName") {
			t.Errorf("ValidateResourceName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
	for id, ok := range map[string]bool{
		"": false, "S-1:a.b_c": true, strings.Repeat("x", 64): true, strings.Repeat("x", 65): false, "a/b": false,
	} {
		if err := ValidateSessionID(id); (err == nil) != ok || (!ok && field(err) != "sessionId") {
			t.Errorf("ValidateSessionID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
	for id, ok := range map[string]bool{
		"": false, "team@corp/app:1": true, strings.Repeat("c", 128): true, strings.Repeat("c", 129): false, "a b": false,
	} {
		if err := ValidateClientID(id); (err == nil) != ok || (!ok && field(err) != "clientId") {
			t.Errorf("ValidateClientID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

// An operator's reason: up to 500 characters (not bytes) of valid UTF-8,
// tab and newline the only control characters.
func TestValidateReason(t *testing.T) {
	for reason, ok := range map[string]bool{
		"": true, "limit raised for the launch\n\tticket 42": true,
		strings.Repeat("é", MaxReasonLength): true, strings.Repeat("é", MaxReasonLength+1): false,
		"bell\a": false, "nul\x00": false, "del\x7f": false, "esc\x1f": false, "space ok ": true, "~": true,
		string([]byte{0xff, 0xfe}): false,
	} {
		if err := ValidateReason(reason); (err == nil) != ok || (!ok && field(err) != "reason") {
			t.Errorf("ValidateReason(%q) = %v, want ok=%v", reason, err, ok)
		}
	}
}

func TestQuotaTypesFailModesAndLeases(t *testing.T) {
	for typ, unit := range map[QuotaType]string{
		TypeDuration: "seconds", TypeCount: "calls", TypeTokens: "tokens", TypeBandwidth: "bytes", "LITRES": "",
	} {
		if typ.Unit() != unit || typ.Valid() != (unit != "") {
			t.Errorf("%s: unit %q valid %v, want %q", typ, typ.Unit(), typ.Valid(), unit)
		}
	}
	if FailMode("").OrDefault() != FailClosed || FailOpen.OrDefault() != FailOpen {
		t.Error("the default fail mode is CLOSED, and a set one is kept")
	}
	// A third of the leak threshold, at least 1 s: two heartbeats may be
	// lost before a session is swept.
	for leak, beat := range map[int64]int64{1: 1, 2: 1, 3: 1, 5: 1, 6: 2, 300: 100, 301: 100} {
		p := Policy{LeakThresholdSeconds: leak}
		if got := p.HeartbeatIntervalSeconds(); got != beat {
			t.Errorf("leak %d s: heartbeat every %d s, want %d", leak, got, beat)
		}
		if p.LeaseDuration() != time.Duration(leak)*time.Second {
			t.Errorf("leak %d s: lease %v", leak, p.LeaseDuration())
		}
	}
	if DefaultLeakThresholdSeconds != 300 || MaxLeakThresholdSeconds != 604800 {
		t.Fatalf("leak threshold default %d, max %d; want 300 and 7 days", DefaultLeakThresholdSeconds, MaxLeakThresholdSeconds)
	}
}

// The sequence of periods starts at the later of creation and the last
// manual reset, in UTC to the millisecond, as stored.
func TestPeriodAnchorAndPeriods(t *testing.T) {
	created := time.Date(2025, 6, 1, 10, 0, 0, 123456789, time.FixedZone("X", 3600))
	p := Policy{CreatedAt: created}
	if a := p.PeriodAnchor(); !a.Equal(created.Truncate(time.Millisecond)) || a.Location() != time.UTC {
		t.Fatalf("anchor %v, want the creation in UTC to the ms", a)
	}
	p.ResetAt = created.Add(-time.Hour)
	if !p.PeriodAnchor().Equal(created.Truncate(time.Millisecond)) {
		t.Fatal("a reset before the creation moved the anchor")
	}
	p.ResetAt = created.Add(time.Hour)
	if !p.PeriodAnchor().Equal(p.ResetAt.Truncate(time.Millisecond)) {
		t.Fatal("a later reset is the anchor")
	}
	p.ResetAt = created // the same instant: either is the anchor
	if !p.PeriodAnchor().Equal(created.Truncate(time.Millisecond)) {
		t.Fatal("reset at creation")
	}

	start := testEpoch
	per := Period{Start: start, End: start.Add(time.Hour)}
	if per.ID() != start.UnixMilli() || per.EndMillis() != start.Add(time.Hour).UnixMilli() {
		t.Fatalf("id %d end %d", per.ID(), per.EndMillis())
	}
	if !per.Contains(start) || per.Contains(start.Add(-time.Millisecond)) || per.Contains(per.End) ||
		!per.Contains(per.End.Add(-time.Millisecond)) {
		t.Fatal("a period is [start, end)")
	}
	forever := Period{Start: start}
	if forever.EndMillis() != 0 || !forever.Contains(start.Add(1000*time.Hour)) {
		t.Fatal("a period that never ends has end 0 and contains every later time")
	}
	b := Balance{Limit: 100, Charged: 30, Reserved: 20}
	if b.Remaining() != 50 {
		t.Fatalf("remaining %d, want limit − charged − reserved = 50", b.Remaining())
	}
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	na := &NotActiveError{SessionID: "s", Status: StatusLeaked}
	if !errors.Is(na, ErrSessionNotActive) || errors.Is(na, ErrSessionNotFound) || na.Error() != "session s is LEAKED" {
		t.Fatalf("NotActiveError: %v", na)
	}
	co := &CircuitOpenError{Backend: "redis", RetryAfter: time.Second}
	if !errors.Is(co, ErrCircuitOpen) || errors.Is(co, ErrUnavailable) || !strings.Contains(co.Error(), "redis") {
		t.Fatalf("CircuitOpenError: %v", co)
	}
	if !isBackendFailure(co) || !isBackendFailure(ErrUnavailable) || isBackendFailure(ErrSessionConflict) {
		t.Fatal("backend failures are ErrUnavailable and ErrCircuitOpen only")
	}
	if e := invalid("f", "bad"); e.Error() != "invalid f: bad" {
		t.Fatalf("%v", e)
	}
}

// Context values carry who changes what and why.
func TestActorAndReasonTravelInTheContext(t *testing.T) {
	ctx := context.Background()
	if ActorFrom(ctx) != AnonymousActor || ActorFrom(WithActor(ctx, "")) != AnonymousActor || ReasonFrom(ctx) != "" {
		t.Fatal("without an actor the change is anonymous, without a reason the reason is empty")
	}
	ctx = WithReason(WithActor(ctx, "ops"), "why")
	if ActorFrom(ctx) != "ops" || ReasonFrom(ctx) != "why" {
		t.Fatalf("actor %q reason %q", ActorFrom(ctx), ReasonFrom(ctx))
	}
}

func TestServerMadeSessionIDsAreValidAndDistinct(t *testing.T) {
	a, b := randomID(), randomID()
	if len(a) != 32 || a == b || ValidateSessionID(a) != nil || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("ids %q, %q: want 32 distinct lower-case hex chars", a, b)
	}
	if !owns("", "c1") || !owns("c1", "c1") || owns("c2", "c1") {
		t.Fatal("a caller owns a session when it is the owner, or when API keys are off (\"\")")
	}
}

// Zero Options take the documented defaults: the policy cache keeps a
// policy 2 s, a finished session is kept 24 h for repeats.
func TestServiceDefaults(t *testing.T) {
	now := testEpoch
	var retention time.Duration
	st := &stubs{finish: func(c FinishCmd) (FinishResult, error) { retention = c.Retention; return FinishResult{}, nil }}
	svc := NewService(st, st, st, daySched{}, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	for _, at := range []time.Duration{0, 2*time.Second - time.Millisecond} {
		now = testEpoch.Add(at)
		if _, err := svc.Policy(ctx, "r"); err != nil {
			t.Fatal(err)
		}
	}
	if st.n("GetPolicy") != 1 {
		t.Fatalf("%d reads within 2 s, want 1", st.n("GetPolicy"))
	}
	now = testEpoch.Add(2 * time.Second)
	if _, err := svc.Policy(ctx, "r"); err != nil {
		t.Fatalf("after 2 s: %v", err)
	}
	until(t, "a read after 2 s", func() bool { return st.n("GetPolicy") == 2 })
	if _, err := svc.Finish(ctx, finishReq); err != nil || retention != 24*time.Hour {
		t.Fatalf("finish: %v, retention %v, want 24h", err, retention)
	}
	if d := NewService(st, st, st, daySched{}, Options{}); d.opt.Now == nil || d.opt.NewSessionID == nil || len(d.opt.NewSessionID()) != 32 {
		t.Fatal("no clock or session ids by default")
	}
}
