package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// Column names a trace must have (matched case-insensitively).
const (
	colTimestamp = "TIMESTAMP"
	colContext   = "ContextTokens"
	colGenerated = "GeneratedTokens"
)

// Row is one request of an LLM trace.
type Row struct {
	Line            int       // line in the CSV file, 1-based (the header is line 1)
	Time            time.Time // invocation time, UTC
	ContextTokens   int64     // prompt tokens
	GeneratedTokens int64     // completion tokens
}

// timestampLayouts are tried in order. Go accepts any number of fractional
// second digits after the seconds field even when the layout has none, so
// "2023-11-16 18:17:03.9799600" (7 digits) parses with the first one.
var timestampLayouts = []string{
	"2006-01-02 15:04:05",
	time.RFC3339Nano,
	"2006-01-02T15:04:05",
}

// parseTimestamp reads a trace TIMESTAMP; values without a zone are UTC.
func parseTimestamp(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range timestampLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a timestamp like 2023-11-16 18:17:03.9799600", s)
}

// parseTokens reads a token count: an integer 0 … 2^53−1.
func parseTokens(s string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || v < 0 || v > client.MaxAmount {
		return 0, fmt.Errorf("%q is not an integer in 0 … 2^53-1", s)
	}
	return v, nil
}

// LoadTrace reads the trace file at path; see ReadTrace. Errors name the
// file.
func LoadTrace(path string, maxRows int) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	rows, err := ReadTrace(f, maxRows)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return rows, nil
}

// loadRows is LoadTrace that also refuses a trace without rows.
func loadRows(path string, maxRows int) ([]Row, error) {
	rows, err := LoadTrace(path, maxRows)
	if err == nil && len(rows) == 0 {
		err = fmt.Errorf("trace %s: no rows", path)
	}
	return rows, err
}

// ReadTrace reads a CSV trace with a header row naming (in any order, among
// any other columns) TIMESTAMP, ContextTokens and GeneratedTokens. It reads
// at most maxRows data rows when maxRows > 0. A missing column, a malformed
// row or a bad value is an error naming the line.
func ReadTrace(r io.Reader, maxRows int) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked below, with a clearer message
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true

	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("empty file: want a header row with TIMESTAMP, ContextTokens, GeneratedTokens")
	}
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	idx := map[string]int{colTimestamp: -1, colContext: -1, colGenerated: -1}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		for name, at := range idx {
			if at < 0 && strings.EqualFold(h, name) {
				idx[name] = i
			}
		}
	}
	var missing []string
	for _, name := range []string{colTimestamp, colContext, colGenerated} {
		if idx[name] < 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("header %q lacks column(s) %s (want TIMESTAMP, ContextTokens, GeneratedTokens)",
			strings.Join(header, ","), strings.Join(missing, ", "))
	}
	need := max(idx[colTimestamp], idx[colContext], idx[colGenerated]) + 1

	var rows []Row
	for maxRows <= 0 || len(rows) < maxRows {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err // *csv.ParseError names the line
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < need {
			return nil, fmt.Errorf("line %d: %d fields, want at least %d", line, len(rec), need)
		}
		row := Row{Line: line}
		if row.Time, err = parseTimestamp(rec[idx[colTimestamp]]); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", line, colTimestamp, err)
		}
		if row.ContextTokens, err = parseTokens(rec[idx[colContext]]); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", line, colContext, err)
		}
		if row.GeneratedTokens, err = parseTokens(rec[idx[colGenerated]]); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", line, colGenerated, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
