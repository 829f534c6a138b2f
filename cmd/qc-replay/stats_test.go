package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

func TestPercentile(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	ten := hundred[:10]
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one p50", []time.Duration{7}, 50, 7},
		{"one p99", []time.Duration{7}, 99, 7},
		{"100 p50", hundred, 50, 50 * time.Millisecond},
		{"100 p99", hundred, 99, 99 * time.Millisecond},
		{"100 p100", hundred, 100, 100 * time.Millisecond},
		{"100 p1", hundred, 1, 1 * time.Millisecond},
		{"100 p0 clamps", hundred, 0, 1 * time.Millisecond},
		{"10 p50", ten, 50, 5 * time.Millisecond},
		{"10 p99", ten, 99, 10 * time.Millisecond},
		{"10 p90", ten, 90, 9 * time.Millisecond},
		{"10 p91", ten, 91, 10 * time.Millisecond},
		{"2 p50", []time.Duration{1, 2}, 50, 1},
		{"3 p50", []time.Duration{1, 2, 3}, 50, 2},
	} {
		if got := Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	p0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	st := func(used, reserved int64, period time.Time) *client.QuotaStatus {
		return &client.QuotaStatus{UsedAmount: used, ReservedAmount: reserved, PeriodStart: period}
	}
	if f := Check(st(100, 5, p0), st(1100, 5, p0), 1000); len(f) != 0 {
		t.Errorf("good run failed: %v", f)
	}
	f := Check(st(100, 5, p0), st(1099, 5, p0), 1000)
	if len(f) != 1 || !strings.Contains(f[0], "usedAmount went up by 999") || !strings.Contains(f[0], "charged 1000") {
		t.Errorf("used mismatch: %v", f)
	}
	f = Check(st(100, 5, p0), st(1100, 50, p0), 1000)
	if len(f) != 1 || !strings.Contains(f[0], "reservedAmount is 50, was 5") {
		t.Errorf("reserved mismatch: %v", f)
	}
	f = Check(st(100, 5, p0), st(1000, 5, p0.Add(time.Hour)), 1000)
	if len(f) != 2 || !strings.Contains(f[0], "period changed") {
		t.Errorf("period change: %v", f)
	}
}

func TestStatsMergeAndErrors(t *testing.T) {
	a, b := newStats(), newStats()
	a.addError("apply", &client.Error{StatusCode: 503, Code: client.CodeBackendUnavailable, Message: "redis down"})
	b.addError("apply", &client.Error{StatusCode: 503, Code: client.CodeBackendUnavailable})
	b.addError("finish", &client.Error{StatusCode: 502, Message: "<html>"})
	b.addError("finish", fmt.Errorf("post: %w", errors.New("connection refused")))
	a.TokensCharged, b.TokensCharged = 10, 20
	a.ApplyLatency = []time.Duration{3, 1}
	b.ApplyLatency = []time.Duration{2}
	b.MaxLag = time.Second
	a.Merge(b)
	want := map[string]int{"apply BACKEND_UNAVAILABLE": 2, "finish HTTP_502": 1, "finish TRANSPORT": 1}
	if fmt.Sprint(a.Errors) != fmt.Sprint(want) {
		t.Errorf("errors = %v, want %v", a.Errors, want)
	}
	if a.ErrorCount() != 4 || a.TokensCharged != 30 || len(a.ApplyLatency) != 3 || a.MaxLag != time.Second || len(a.FirstErrs) != 4 {
		t.Errorf("merged = %+v", a)
	}
	var sb strings.Builder
	PrintSummary(&sb, a, 2*time.Second)
	out := sb.String()
	for _, w := range []string{"errors:           4", "apply BACKEND_UNAVAILABLE:", "finish TRANSPORT:", "tokens charged:   30", "wall time:        2.000 s"} {
		if !strings.Contains(out, w) {
			t.Errorf("summary lacks %q:\n%s", w, out)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&client.Error{StatusCode: 503, Code: client.CodeBackendUnavailable}, true},
		{&client.Error{StatusCode: 503, Code: client.CodeCircuitOpen}, false},
		{&client.Error{StatusCode: 429, Code: client.CodeQuotaExhausted}, false},
		{&client.Error{StatusCode: 500, Code: client.CodeInternal}, false},
		{&client.Error{StatusCode: 502}, true},
		{&client.Error{StatusCode: 500}, false},
		{errors.New("connection reset"), true},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
