package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/testenv"
)

func writePoolsTrace(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	t0 := time.Date(2023, 11, 16, 18, 0, 0, 0, time.UTC)
	for i := range n {
		fmt.Fprintf(&b, "%s,%d,%d\n", t0.Add(time.Duration(i)*700*time.Millisecond).Format("2006-01-02 15:04:05.0000000"), 200+(i*7919)%4000, i%200)
	}
	p := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPoolsReportsTheThreeSchemes(t *testing.T) {
	trace := writePoolsTrace(t, 4000)
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"pools", "--trace", trace, "--borrow-limit", "300", "--events"}, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"12 lines", "burst: core-2 ×3", "static", "pools", "elastic", "32% / 8.7% / 68%", "11% / 0.9% / 89%"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	var again bytes.Buffer
	_ = run(context.Background(), []string{"pools", "--trace", trace, "--borrow-limit", "300", "--events"}, &again, &errb)
	if again.String() != s {
		t.Error("two runs of the same trace differ")
	}
}

func TestPoolsRefusesBadFlags(t *testing.T) {
	trace := writePoolsTrace(t, 10)
	for _, args := range [][]string{
		{"--lines", "2"},
		{"--burst", "0.5"},
		{"--burst", "x"},
		{"--period", "10ms"},
		{"--limit", "-1"},
		{"--limit-factor", "0"},
		{"--shared", "50"},
		{"--borrow-limit", "5000"},
		{"stray"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"pools", "--trace", trace}, args...), &out, &errb)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}

// TestPoolsLiveAgainstTheRealService replays a split trace's first 300
// requests through a real server (dev mode and real backends) with its
// twelve lines: every call is answered (granted, or 429 with a reason),
// never an error.
func TestPoolsLiveAgainstTheRealService(t *testing.T) {
	trace := writePoolsTrace(t, 300)
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.Start(t, mode)
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"pools", "--trace", trace, "--url", srv.URL, "--resource", testenv.Resource(t),
				"--admin-token", srv.AdminToken, "--borrow-limit", "300", "--limit-factor", "0.5"}, &out, &errOut)
			if err != nil {
				t.Fatalf("live run: %v\n%s\n%s", err, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "live "+srv.URL+": ") || !strings.Contains(out.String(), " 0 errors") {
				t.Fatalf("output:\n%s", out.String())
			}
		})
	}
}

// --json prints one object with the figures of the three runs, each with
// its own idle measure, the ceiling and the refusal measures; the window
// and the seed pick other data.
func TestPoolsJSONReport(t *testing.T) {
	trace := writePoolsTrace(t, 4000)
	report := func(args ...string) poolsReport {
		t.Helper()
		var out, errb bytes.Buffer
		if err := run(context.Background(), append([]string{"pools", "--trace", trace, "--json"}, args...), &out, &errb); err != nil {
			t.Fatalf("run: %v\n%s", err, errb.String())
		}
		var r poolsReport
		dec := json.NewDecoder(&out)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil || dec.More() {
			t.Fatalf("not one JSON object: %v\n%s", err, out.String())
		}
		return r
	}
	r := report()
	if r.Limit <= 0 || r.Periods == 0 || r.PeriodSeconds != 300 || r.Settings.BorrowLimitPercent != 50 {
		t.Fatalf("report %+v", r)
	}
	for name, s := range map[string]schemeReport{"static": r.Static, "pools": r.Pools, "elastic": r.Elastic} {
		if s.Requests == 0 || s.CeilingPercent <= 0 || s.CeilingPercent > 100 || s.UtilisationPercent > s.CeilingPercent+1e-9 ||
			s.IdlePercent < 0 || s.ExploreRefusalsNonCriticalPercent < 0 || s.ExploreRefusalsNonCriticalPercent > 100 {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if r.Static.CeilingPercent != r.Elastic.CeilingPercent {
		t.Errorf("the ceiling is the workload's, not a scheme's: %v %v", r.Static.CeilingPercent, r.Elastic.CeilingPercent)
	}
	half := report("--from", "20")
	other := report("--seed", "3")
	if half.Static.Requests >= r.Static.Requests || reflect.DeepEqual(other.Static, r.Static) && reflect.DeepEqual(other.Pools, r.Pools) {
		t.Errorf("--from 20: %d requests of %d; --seed 3 the same figures", half.Static.Requests, r.Static.Requests)
	}
}

// TestPoolsTimedLiveRunAgainstTheRealService: --speedup replays the trace
// on its own clock made faster through a real server (elasticity OFF) and
// reports the server's figures next to the model's for the same settings;
// every apply is answered.
func TestPoolsTimedLiveRunAgainstTheRealService(t *testing.T) {
	trace := writePoolsTrace(t, 60) // 42 s of trace: 4.2 s at ×10
	for _, mode := range testenv.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.Start(t, mode)
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"pools", "--trace", trace, "--url", srv.URL, "--resource", testenv.Resource(t),
				"--admin-token", srv.AdminToken, "--period", "20s", "--speedup", "10", "--burst", "", "--json"}, &out, &errOut)
			if err != nil {
				t.Fatalf("timed live run: %v\n%s", err, errOut.String())
			}
			var r poolsReport
			if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Speed == nil {
				t.Fatalf("report: %v\n%s", err, out.String())
			}
			s, m := r.Speed.Server, r.Speed.Model
			if r.Speed.Elasticity != "OFF" || s.Requests != m.Requests || s.Requests != r.Elastic.Requests || s.Refused > s.Requests {
				t.Fatalf("server %+v, model %+v", s, m)
			}
		})
	}
	var errOut bytes.Buffer
	if err := run(context.Background(), []string{"pools", "--trace", trace, "--url", "http://127.0.0.1:1", "--period", "15s", "--speedup", "10"}, io.Discard, &errOut); err == nil || !strings.Contains(err.Error(), "whole number of seconds") {
		t.Fatalf("a period / speed-up of 1.5 s: %v", err)
	}
}
