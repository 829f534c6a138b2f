package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestWriteRowsDistribution checks the generated TSV against the fill's
// rules: one line of 17 columns per row in id order, session ids unique and
// ordered by id, res-7 holding every leak (20 % of its rows), USING rows
// only in the last hour before T with \N as their end, and charged +
// refunded = granted except for the overage rows.
func TestWriteRowsDistribution(t *testing.T) {
	const total, tEnd = 100_000, int64(1_796_320_800_000)
	var buf bytes.Buffer
	if err := writeRows(&buf, total, 1, total, tEnd); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != total {
		t.Fatalf("%d lines, want %d", len(lines), total)
	}
	ncols := len(strings.Split(genColumns, ","))
	leaks, res7, using := map[string]int{}, 0, 0
	prevSession := ""
	for k, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != ncols {
			t.Fatalf("line %d: %d columns, want %d: %q", k, len(f), ncols, l)
		}
		if f[0] != strconv.Itoa(k+1) {
			t.Fatalf("line %d: id %s", k, f[0])
		}
		if f[3] <= prevSession || len(f[3]) != 35 {
			t.Fatalf("line %d: session id %q not after %q or not 35 characters (the former SQL's format)", k, f[3], prevSession)
		}
		prevSession = f[3]
		n := func(c int) int64 {
			v, err := strconv.ParseInt(f[c], 10, 64)
			if err != nil {
				t.Fatalf("line %d column %d: %v", k, c, err)
			}
			return v
		}
		start, period := n(11), n(4)
		if period != start-start%86400000 || start <= tEnd-spanMs || start > tEnd {
			t.Fatalf("line %d: start %d, period %d", k, start, period)
		}
		if f[1] == "res-7" {
			res7++
		}
		switch f[13] {
		case "USING":
			using++
			if start < tEnd-3600000 || f[12] != `\N` {
				t.Fatalf("line %d: USING started %d ms before T, end %q", k, tEnd-start, f[12])
			}
		case "LEAKED":
			leaks[f[1]]++
		case "FINISHED":
			if n(8)+n(9)-n(10) != n(7) {
				t.Fatalf("line %d: charged %d + refunded %d - overage %d != granted %d", k, n(8), n(9), n(10), n(7))
			}
		default:
			t.Fatalf("line %d: status %q", k, f[13])
		}
	}
	if len(leaks) != 1 || leaks["res-7"]*5 < res7-using || leaks["res-7"]*5 > res7 {
		t.Errorf("leaks %v of %d res-7 rows, want all in res-7, 20 %%", leaks, res7)
	}
	if using == 0 || using > total/2000 {
		t.Errorf("%d USING rows, want the last hour's (~%d)", using, total/2880)
	}
}

// TestAppendPadUpperCase checks the session id's hex matches MariaDB's
// LPAD(HEX(v), w, '0') for the fill's values.
func TestAppendPadUpperCase(t *testing.T) {
	for _, c := range []struct {
		v     int64
		base  int
		width int
		want  string
	}{{255, 16, 4, "00FF"}, {100_000_000, 16, 12, "000005F5E100"}, {7, 10, 2, "07"}} {
		if got := string(appendPad(nil, c.v, c.base, c.width)); got != c.want {
			t.Errorf("appendPad(%d, %d, %d) = %q, want %q", c.v, c.base, c.width, got, c.want)
		}
	}
}
