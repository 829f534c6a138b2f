package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
)

// genMain is `ledgerscale gen`: rows -from…-to of a fill of -total rows
// ending at -tend (Unix ms) as TSV on stdout.
func genMain(args []string) {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	total := fs.Int64("total", 100_000_000, "rows of the whole fill")
	from := fs.Int64("from", 1, "first row (1-based)")
	to := fs.Int64("to", 0, "last row, inclusive (default -total)")
	tEnd := fs.Int64("tend", 0, "the fill's hour T, Unix ms (required)")
	columns := fs.Bool("columns", false, "print the TSV's column list (for LOAD DATA) and exit")
	fs.Int64Var(&spanMs, "span", spanMs, "ms of starts the fill spans, ending at -tend (default 120 days)")
	_ = fs.Parse(args)
	if *columns {
		fmt.Println(genColumns)
		return
	}
	if *to == 0 {
		*to = *total
	}
	if *tEnd <= 0 || *from < 1 || *to > *total || *from > *to {
		fs.Usage()
		os.Exit(2)
	}
	if err := writeRows(os.Stdout, *total, *from, *to, *tEnd); err != nil {
		log.Fatal(err)
	}
}

// genColumns are the quota_usage columns of a generated row, in the TSV's
// order (the list LOAD DATA names; the others keep their defaults).
const genColumns = "id, resource_name, client_id, session_id, period_start_ms, apply_amount, min_amount, " +
	"granted_amount, charged_amount, refunded_amount, overage_amount, start_ms, end_ms, status, " +
	"leak_recovered, business_line, drawn_shared"

// spanMs is the fill's span of session starts, in ms: 120 days unless
// -span (QC_SCALE_SPAN_DAYS) says otherwise; with the rows scaled by the
// same factor a shorter fill has the 100 M run's density per resource.
var spanMs int64 = 120 * 86400000

// writeRows writes rows from…to (1-based, inclusive) of a fill of total
// rows ending at the hour tEndMs (Unix ms) as LOAD DATA's default TSV
// (tab-separated, \N for NULL), one line a row, in id order. Row i is the
// row ledger-scale.sh's former INSERT … SELECT wrote for i: resource
// res-(i mod 10), client client-((i div 10)·37 mod 50), line "ads" when
// 3 divides i, start T−120 days + i·(120 days / total), USING when it
// started in the last hour before T, else LEAKED when i mod 50 = 7 (all in
// res-7: 20 % of its rows), else FINISHED with 30–99 % charged and overage
// 100 when i mod 100 = 57. It returns the first write error.
func writeRows(w io.Writer, total, from, to, tEndMs int64) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var b []byte
	for i := from; i <= to; i++ {
		b = appendRow(b[:0], i, total, tEndMs)
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// appendRow appends row i's TSV line (with its newline) to b.
func appendRow(b []byte, i, total, tEndMs int64) []byte {
	st := tEndMs - spanMs + i*spanMs/total
	g := 1000 + i*13%9000
	using := st >= tEndMs-3600000
	leaked := !using && i%50 == 7
	charged, refunded, overage := g, int64(0), int64(0)
	if !using && !leaked {
		charged = g * (30 + i*7%70) / 100
		refunded = g - charged
		if i%100 == 57 {
			charged += 100
			overage = 100
		}
	}
	b = strconv.AppendInt(b, i, 10)
	b = append(b, "\tres-"...)
	b = strconv.AppendInt(b, i%10, 10)
	b = append(b, "\tclient-"...)
	b = appendPad(b, (i/10)*37%50, 10, 2)
	b = append(b, '\t')
	// Session id ordered by row, as UUIDv7 by time (upper-case hex, as
	// MariaDB's HEX()).
	b = appendPad(b, i, 16, 12)
	b = append(b, "-7"...)
	b = appendPad(b, i*40503%4096, 16, 3)
	b = append(b, "-8000-"...)
	b = appendPad(b, i*2654435761%281474976710656, 16, 12)
	b = append(b, '\t')
	b = strconv.AppendInt(b, st-st%86400000, 10)
	for _, v := range []int64{g, 0, g, charged, refunded, overage, st} {
		b = append(b, '\t')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, '\t')
	if using {
		b = append(b, `\N`...)
	} else {
		b = strconv.AppendInt(b, st+1000+i*31%600000, 10)
	}
	switch {
	case using:
		b = append(b, "\tUSING"...)
	case leaked:
		b = append(b, "\tLEAKED"...)
	default:
		b = append(b, "\tFINISHED"...)
	}
	b = append(b, "\t0\t"...)
	if i%3 == 0 {
		b = append(b, "ads"...)
	}
	b = append(b, '\t')
	b = strconv.AppendInt(b, g, 10)
	return append(b, '\n')
}

// appendPad appends v in base (upper-case digits) left-padded with zeros
// to width (v's digits fit it for every row of a 100 M fill).
func appendPad(b []byte, v int64, base, width int) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], v, base)
	for k := len(s); k < width; k++ {
		b = append(b, '0')
	}
	for _, c := range s {
		if c >= 'a' && c <= 'f' {
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}
