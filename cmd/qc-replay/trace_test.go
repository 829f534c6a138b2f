package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTraceGood(t *testing.T) {
	p := writeFile(t, "TIMESTAMP,ContextTokens,GeneratedTokens\n"+
		"2023-11-16 18:17:03.9799600,4808,10\n"+
		"2023-11-16 18:17:04.0319600,3180,8\n"+
		"\n"+ // blank lines are skipped
		"2023-11-16 18:17:05,0,0\n")
	rows, err := LoadTrace(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Line: 2, Time: time.Date(2023, 11, 16, 18, 17, 3, 979960000, time.UTC), ContextTokens: 4808, GeneratedTokens: 10},
		{Line: 3, Time: time.Date(2023, 11, 16, 18, 17, 4, 31960000, time.UTC), ContextTokens: 3180, GeneratedTokens: 8},
		{Line: 5, Time: time.Date(2023, 11, 16, 18, 17, 5, 0, time.UTC), ContextTokens: 0, GeneratedTokens: 0},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
		if rows[i].Time.Location() != time.UTC {
			t.Errorf("row %d time not UTC: %v", i, rows[i].Time)
		}
	}

	// maxRows stops early, even before a bad row.
	p = writeFile(t, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,1,2\n2023-11-16 18:17:04,x,y\n")
	rows, err = LoadTrace(p, 1)
	if err != nil || len(rows) != 1 {
		t.Fatalf("maxRows 1: %v, %v", rows, err)
	}
}

func TestReadTraceColumnsByName(t *testing.T) {
	// Other order, extra columns, a BOM, different case, quoting, spaces.
	in := "\ufeffid,GeneratedTokens, contexttokens,Timestamp\n" +
		"a,7,\"100\",2023-11-16T18:17:03.5Z\n"
	rows, err := ReadTrace(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ContextTokens != 100 || rows[0].GeneratedTokens != 7 ||
		!rows[0].Time.Equal(time.Date(2023, 11, 16, 18, 17, 3, 500000000, time.UTC)) {
		t.Errorf("rows = %+v", rows)
	}
}

func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"empty", "", []string{"empty file"}},
		{"missing one", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,1\n", []string{"lacks column(s) GeneratedTokens"}},
		{"missing all", "a,b,c\n1,2,3\n", []string{"TIMESTAMP, ContextTokens, GeneratedTokens"}},
		{"bad number", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,2\n2023-11-16 18:17:04,12x,2\n",
			[]string{"line 3", "ContextTokens", `"12x"`}},
		{"negative", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,-2\n",
			[]string{"line 2", "GeneratedTokens", `"-2"`}},
		{"too big", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,9007199254740992,2\n",
			[]string{"line 2", "ContextTokens"}},
		{"bad time", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,2\n\n16/11/2023,1,2\n",
			[]string{"line 4", "TIMESTAMP", "16/11/2023"}},
		{"short row", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1\n", []string{"line 2", "2 fields"}},
		{"bad quoting", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,\"1,2\n", []string{"line 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.in), 0)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadTraceNamesFile(t *testing.T) {
	p := writeFile(t, "TIMESTAMP,ContextTokens\n")
	_, err := LoadTrace(p, 0)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "GeneratedTokens") {
		t.Errorf("err = %v", err)
	}
	_, err = LoadTrace(filepath.Join(t.TempDir(), "nope.csv"), 0)
	if err == nil || !strings.Contains(err.Error(), "nope.csv") {
		t.Errorf("err = %v", err)
	}
}

// TestSharedTrace reads the real trace when it is present (it is never
// copied into the repository).
func TestSharedTrace(t *testing.T) {
	p := filepath.Join("..", "..", defaultTrace)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared trace not available: %v", err)
	}
	rows, err := LoadTrace(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The README says 8,818 rows, but the file has 8,819 data rows (CRLF,
	// no final newline, so `wc -l` counts 8,819 lines with the header); the
	// token totals match the README.
	if len(rows) != 8819 {
		t.Errorf("rows = %d, want 8819", len(rows))
	}
	var ctx, gen int64
	for _, r := range rows {
		ctx += r.ContextTokens
		gen += r.GeneratedTokens
	}
	if ctx != 18059974 || gen != 245896 {
		t.Errorf("totals = %d context, %d generated; want 18059974, 245896", ctx, gen)
	}
}
