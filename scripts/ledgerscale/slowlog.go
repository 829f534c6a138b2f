package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// entry is one statement of the slow log.
type entry struct {
	query, schema                              string
	seconds                                    float64
	examined, affected, accessed, read, update int64
	explain                                    []string
}

// readSlowLog parses the entries written after offset.
func readSlowLog(path string, offset int64) ([]entry, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator names the slow log (-slowlog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	var out []entry
	var cur *entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# User@Host:"):
			out = append(out, entry{})
			cur = &out[len(out)-1]
		case cur == nil:
		case strings.HasPrefix(line, "# Thread_id:"):
			if f := strings.Fields(line); len(f) > 4 && f[3] == "Schema:" {
				cur.schema = f[4]
			}
		case strings.HasPrefix(line, "# explain: "):
			cur.explain = append(cur.explain, strings.TrimPrefix(line, "# explain: "))
		case strings.HasPrefix(line, "#"):
			fields := strings.Fields(strings.TrimPrefix(line, "#"))
			for i := 0; i+1 < len(fields); i += 2 {
				v := fields[i+1]
				switch fields[i] {
				case "Query_time:":
					cur.seconds, _ = strconv.ParseFloat(v, 64)
				case "Rows_examined:":
					cur.examined, _ = strconv.ParseInt(v, 10, 64)
				case "Rows_affected:":
					cur.affected, _ = strconv.ParseInt(v, 10, 64)
				case "Pages_accessed:":
					cur.accessed, _ = strconv.ParseInt(v, 10, 64)
				case "Pages_read:":
					cur.read, _ = strconv.ParseInt(v, 10, 64)
				case "Pages_updated:":
					cur.update, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		case strings.HasPrefix(line, "SET timestamp="), strings.HasPrefix(line, "use "):
		default:
			cur.query += " " + strings.TrimSpace(line)
		}
	}
	return out, sc.Err()
}

// stmtKind names a statement by its first words, without the values.
func stmtKind(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	for _, cut := range []string{" VALUES ", " WHEN ", " WHERE ", " FROM quota_usage_rollup WHERE"} {
		if i := strings.Index(q, cut); i > 0 && i < 120 {
			q = q[:i]
			break
		}
	}
	if len(q) > 110 {
		q = q[:110] + "…"
	}
	return q
}

// stat sums one kind of statement within a phase.
type stat struct {
	kind                                       string
	count                                      int64
	examined, affected, accessed, read, update int64
	seconds                                    []float64
	explain                                    []string
}

// report prints the phases: per kind of statement its count and means per
// call, then the wall times and the plans.
func report(w io.Writer, label string, rows int64, phases []*phase, entries []entry) {
	byPhase := map[string][]*stat{}
	var cur string
	for _, e := range entries {
		if i := strings.Index(e.query, "qcmark:"); i >= 0 {
			cur = strings.TrimRight(e.query[i+len("qcmark:"):], "';")
			continue
		}
		if cur == "" || skipStatement(e.query) {
			continue
		}
		k := stmtKind(e.query)
		list := byPhase[cur]
		j := slices.IndexFunc(list, func(s *stat) bool { return s.kind == k })
		if j < 0 {
			list = append(list, &stat{kind: k, explain: e.explain})
			byPhase[cur], j = list, len(list)-1
		}
		s := list[j]
		s.count++
		s.examined += e.examined
		s.affected += e.affected
		s.accessed += e.accessed
		s.read += e.read
		s.update += e.update
		s.seconds = append(s.seconds, e.seconds)
	}
	fmt.Fprintf(w, "### %s: quota_usage holds %d rows\n\n", label, rows)
	fmt.Fprintln(w, "Per call (means over the phase's calls; a call's statements summed): rows examined, InnoDB pages accessed / read from disk / updated, then the wall time of a call.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | calls | statements | rows examined | pages accessed | pages read | pages updated | wall p50 | wall max |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range phases {
		var st stat
		for _, s := range byPhase[p.name] {
			st.count += s.count
			st.examined += s.examined
			st.accessed += s.accessed
			st.read += s.read
			st.update += s.update
		}
		c := float64(max(p.calls, 1))
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %.2f | %.1f | %s | %s |\n", p.name, p.calls,
			float64(st.count)/c, float64(st.examined)/c, float64(st.accessed)/c, float64(st.read)/c,
			float64(st.update)/c, pct(p.times, 50), pct(p.times, 100))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Global counters per call (SHOW GLOBAL STATUS deltas over the phase / calls; the last row is the counters' own cost):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | "+strings.Join(statusVars, " | ")+" |")
	fmt.Fprintln(w, "|---|"+strings.Repeat("---:|", len(statusVars)))
	for _, p := range phases {
		fmt.Fprintf(w, "| %s |", p.name)
		c := float64(max(p.calls, 1))
		for _, v := range statusVars {
			fmt.Fprintf(w, " %.1f |", float64(p.after[v]-p.before[v])/c)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Statements per phase (count; per statement: rows examined, pages accessed, pages read; server time p50) and their EXPLAIN (from the slow log: rows = estimate, r_rows = actual):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "```")
	for _, p := range phases {
		fmt.Fprintf(w, "%s\n", p.name)
		for _, s := range byPhase[p.name] {
			c := float64(s.count)
			slices.Sort(s.seconds)
			fmt.Fprintf(w, "  %6d × %s\n         examined %.1f  accessed %.1f  read %.2f  server p50 %.3f ms\n", s.count, s.kind,
				float64(s.examined)/c, float64(s.accessed)/c, float64(s.read)/c, 1000*s.seconds[len(s.seconds)/2])
			for _, x := range s.explain {
				fmt.Fprintf(w, "         %s\n", strings.Join(strings.Fields(x), " "))
			}
		}
	}
	fmt.Fprintln(w, "```")
}

// skipStatement leaves out what the driver and database/sql send around
// the measured statements (transaction control, the pool's own queries).
func skipStatement(q string) bool {
	q = strings.ToUpper(strings.TrimSpace(q))
	for _, p := range []string{"COMMIT", "ROLLBACK", "START TRANSACTION", "BEGIN", "SET ", "SELECT @@", "SHOW ", "SELECT 1"} {
		if strings.HasPrefix(q, p) {
			return true
		}
	}
	return false
}

// pct is the p-th percentile (nearest rank) of ds, in milliseconds.
func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i, 1), len(s)) - 1
	return fmt.Sprintf("%.2f ms", float64(s[i].Microseconds())/1000)
}
