// Command ledgerscale measures what the ledger's hot-path writes (the
// apply's INSERT, the finish's UPDATE) and its reads (GET /admin/usage's
// sums, the rebuild's period totals, seed snapshot and open-session pages)
// cost on a large ledger, through internal/mysqlstore — the code the
// service runs. Run by scripts/ledger-scale.sh measure (issue 23 §2;
// docs/performance.md, "Ledger lifecycle at scale"), never by make test.
//
// Every statement the store sends is logged by the server's slow query log
// (long_query_time 0, log_slow_verbosity innodb,query_plan,explain, set for
// the run and put back after), which gives per statement counts that do not
// depend on the machine's load: rows examined, InnoDB pages accessed (the
// buffer pool's page lookups), pages read from disk, and the statement's
// EXPLAIN. Wall times are measured beside them, as an indication only. The
// slow log file must be readable here (-slowlog: the server runs on this
// machine).
//
//	go run ./scripts/ledgerscale -dsn 'root@tcp(127.0.0.1:13906)/qc_scale' -slowlog /tmp/qc-6/slow.log
//
// `ledgerscale gen -total N -from A -to B -tend MS` writes the fill's rows
// A…B as TSV for LOAD DATA (gen.go; ledger-scale.sh fill). `ledgerscale
// rollup` runs the lifecycle job on one resource at the fill's clock
// (rollup.go). -only-totals measures the current period's totals only (the
// first call on a freshly started server is the cold one).
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/quota"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "gen" {
		genMain(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "rollup" {
		rollupMain(os.Args[2:])
		return
	}
	dsn := flag.String("dsn", "", "DSN of the ledger's database (required)")
	slowLog := flag.String("slowlog", "", "the server's slow query log file, readable here (required)")
	n := flag.Int("n", 1000, "sessions applied and finished per id style")
	resource := flag.String("resource", "res-0", "resource of the sessions and of the reads")
	label := flag.String("label", "", "name of this run in the output (e.g. the table's size)")
	flag.BoolVar(&onlyTotals, "only-totals", false, "read the current period's totals only (twice: cold, then warm)")
	flag.Parse()
	if *dsn == "" || *slowLog == "" || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dsn, *slowLog, *n, *resource, *label); err != nil {
		log.Fatal(err)
	}
}

// run measures and prints the Markdown report on stdout.
func run(dsn, slowLog string, n int, resource, label string) error {
	ctx := context.Background()
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	tEnd, err := endOfData(ctx, admin)
	if err != nil {
		return err
	}
	offset, err := fileSize(slowLog)
	if err != nil {
		return fmt.Errorf("slow log: %w", err)
	}
	// Globals first: connections copy long_query_time when they open, so
	// the store's pool must open after this.
	for _, q := range []string{
		`SET GLOBAL log_slow_verbosity = 'innodb,query_plan,explain'`,
		`SET GLOBAL long_query_time = 0`,
		`SET GLOBAL slow_query_log = 1`,
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	defer func() {
		_, _ = admin.ExecContext(ctx, `SET GLOBAL slow_query_log = 0`)
		_, _ = admin.ExecContext(ctx, `SET GLOBAL long_query_time = 10`)
	}()
	store, err := mysqlstore.Open(ctx, dsn, mysqlstore.Options{QueryTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer store.Close()

	m := &meter{db: store.DB().DB, admin: admin}
	if err := measureWrites(ctx, m, store, n, resource, tEnd); err != nil {
		return err
	}
	if err := measureReads(ctx, m, store, resource, tEnd); err != nil {
		return err
	}
	// A phase with no call: what reading the counters itself costs.
	if _, err := m.start(ctx, "(nothing: the counters' own cost)"); err != nil {
		return err
	}
	if err := m.end(ctx); err != nil {
		return err
	}
	if _, err := admin.ExecContext(ctx, `SET GLOBAL slow_query_log = 0`); err != nil {
		return err
	}
	entries, err := readSlowLog(slowLog, offset)
	if err != nil {
		return err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	// Only this database's statements: other clients of the server (a fill
	// of another database) are logged too.
	entries = slices.DeleteFunc(entries, func(e entry) bool { return e.schema != cfg.DBName })
	rows, err := tableRows(ctx, admin)
	if err != nil {
		return err
	}
	report(os.Stdout, label, rows, m.phases, entries)
	return nil
}

// onlyTotals: -only-totals.
var onlyTotals bool

// measureCurrentTotals reads the current period's totals twice.
func measureCurrentTotals(ctx context.Context, m *meter, s *mysqlstore.Store, resource string, tEnd time.Time) error {
	p, err := m.start(ctx, "period totals, current period")
	if err != nil {
		return err
	}
	for range 2 {
		if err := p.time(func() error { _, err := s.PeriodTotals(ctx, resource, tEnd.Truncate(24*time.Hour)); return err }); err != nil {
			return fmt.Errorf("period totals: %w", err)
		}
	}
	return nil
}

// endOfData is the fill's hour T (scale_meta, written by ledger-scale.sh
// fill), or the current hour for a database without it (the empty run).
func endOfData(ctx context.Context, db *sql.DB) (time.Time, error) {
	var ms int64
	err := db.QueryRowContext(ctx, `SELECT t_end_ms FROM scale_meta`).Scan(&ms)
	if err != nil {
		// Table missing or empty: a fresh schema.
		return time.Now().UTC().Truncate(time.Hour), nil //nolint:nilerr // no fill: measure at now
	}
	return time.UnixMilli(ms).UTC(), nil
}

func tableRows(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM quota_usage`).Scan(&n)
	return n, err
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// phase is one measured step: its name, how many calls it made, their wall
// times and the server's global status before and after it.
type phase struct {
	name          string
	calls         int
	times         []time.Duration
	before, after map[string]int64
}

// statusVars are the global counters kept per phase (the server has no
// other client while it runs; background threads, purge among them, count
// in the InnoDB ones).
var statusVars = []string{"Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads",
	"Innodb_rows_read", "Handler_read_key", "Handler_read_next"}

func globalStatus(ctx context.Context, db *sql.DB) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN (?, ?, ?, ?, ?)`,
		statusVars[0], statusVars[1], statusVars[2], statusVars[3], statusVars[4])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// meter marks phases in the slow log (a SELECT naming the phase, sent
// before its first statement) and keeps their wall times.
type meter struct {
	db, admin *sql.DB
	phases    []*phase
}

func (m *meter) start(ctx context.Context, name string) (*phase, error) {
	if err := m.end(ctx); err != nil {
		return nil, err
	}
	if _, err := m.db.ExecContext(ctx, `SELECT ?`, "qcmark:"+name); err != nil {
		return nil, err
	}
	st, err := globalStatus(ctx, m.admin)
	if err != nil {
		return nil, err
	}
	p := &phase{name: name, before: st}
	m.phases = append(m.phases, p)
	return p, nil
}

// end closes the last phase's counters.
func (m *meter) end(ctx context.Context) error {
	if len(m.phases) == 0 || m.phases[len(m.phases)-1].after != nil {
		return nil
	}
	st, err := globalStatus(ctx, m.admin)
	m.phases[len(m.phases)-1].after = st
	return err
}

// time runs f once as a call of p.
func (p *phase) time(f func() error) error {
	t0 := time.Now()
	err := f()
	p.times = append(p.times, time.Since(t0))
	p.calls++
	return err
}

// uuid4 is a random session id; uuid7 one ordered by time (its first 48
// bits are Unix ms, as the fill's ids are ordered by their row).
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return format(b)
}

func uuid7(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli())) // UUIDv7: the 48-bit Unix ms first
	copy(b[:6], ms[2:])
	b[6], b[8] = b[6]&0x0f|0x70, b[8]&0x3f|0x80
	return format(b)
}

func format(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// measureWrites applies n sessions, one at a time (each its own group
// commit: one INSERT of one row), then finishes them the same way, once
// with random ids and once with time-ordered ones.
func measureWrites(ctx context.Context, m *meter, s *mysqlstore.Store, n int, resource string, tEnd time.Time) error {
	period := tEnd.Truncate(24 * time.Hour)
	for _, style := range []string{"uuid4", "uuid7"} {
		recs := make([]quota.UsageRecord, n)
		for i := range recs {
			id := uuid4()
			if style == "uuid7" {
				id = uuid7(time.Now())
			}
			recs[i] = quota.UsageRecord{ResourceName: resource, ClientID: "client-scale", SessionID: id,
				PeriodStart: period, ApplyAmount: 1000, GrantedAmount: 1000, ChargedAmount: 1000,
				StartTime: tEnd.Add(-time.Minute), Status: quota.StatusUsing}
		}
		p, err := m.start(ctx, "apply "+style)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := p.time(func() error { return s.InsertSession(ctx, r) }); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
		}
		if p, err = m.start(ctx, "finish "+style); err != nil {
			return err
		}
		for _, r := range recs {
			r.ChargedAmount, r.RefundedAmount, r.EndTime, r.Status = 700, 300, tEnd, quota.StatusFinished
			if err := p.time(func() error { return s.FinishSession(ctx, r) }); err != nil {
				return fmt.Errorf("finish: %w", err)
			}
		}
	}
	return nil
}

// measureReads runs each read twice: the usage sums (every grouping, three
// windows ending at T), the period totals of the current period and of one
// 30 days back, the seed snapshot and the walk over the open sessions.
func measureReads(ctx context.Context, m *meter, s *mysqlstore.Store, resource string, tEnd time.Time) error {
	const day = 24 * time.Hour
	if onlyTotals {
		return measureCurrentTotals(ctx, m, s, resource, tEnd)
	}
	// Windows in days before T (the last ones end an hour after T, so they
	// hold the open sessions); "ending 9 days back" and "the previous
	// period" (yesterday, UTC: the data's periods are daily) lie below the
	// rollup's watermark once closed periods are rolled up.
	prev := tEnd.Truncate(day).Sub(tEnd)
	windows := []struct {
		name     string
		from, to time.Duration
	}{
		{"last 1 day", -day, time.Hour},
		{"the previous period", prev - day, prev},
		{"last 30 days", -30 * day, time.Hour},
		{"30 days ending 9 days back", -39 * day, -9 * day},
		{"last 120 days", -120 * day, time.Hour},
	}
	for _, w := range windows {
		for _, g := range []string{quota.GroupByClient, quota.GroupByLine, quota.GroupByDay, quota.GroupByHour} {
			p, err := m.start(ctx, fmt.Sprintf("usage %s by %s", w.name, g))
			if err != nil {
				return err
			}
			q := quota.UsageQuery{Resource: resource, From: tEnd.Add(w.from), To: tEnd.Add(w.to), GroupBy: g, MaxGroups: 1000}
			for range 2 {
				if err := p.time(func() error { _, err := s.Usage(ctx, q); return err }); err != nil {
					return fmt.Errorf("usage: %w", err)
				}
			}
		}
	}
	period := tEnd.Truncate(24 * time.Hour)
	for _, pt := range []struct {
		name  string
		start time.Time
	}{{"current period", period}, {"period 30 days back", period.Add(-30 * 24 * time.Hour)}} {
		p, err := m.start(ctx, "period totals, "+pt.name)
		if err != nil {
			return err
		}
		for range 2 {
			if err := p.time(func() error { _, err := s.PeriodTotals(ctx, resource, pt.start); return err }); err != nil {
				return fmt.Errorf("period totals: %w", err)
			}
		}
	}
	p, err := m.start(ctx, "seed snapshot, current period")
	if err != nil {
		return err
	}
	for range 2 {
		if err := p.time(func() error { _, _, err := s.SeedSnapshot(ctx, resource, period); return err }); err != nil {
			return fmt.Errorf("seed snapshot: %w", err)
		}
	}
	if p, err = m.start(ctx, "open sessions, pages of 1000"); err != nil {
		return err
	}
	for range 2 {
		err := p.time(func() error {
			for after := int64(0); ; {
				page, next, err := s.OpenSessionsPage(ctx, resource, after, 1000)
				if err != nil || len(page) < 1000 {
					return err
				}
				after = next
			}
		})
		if err != nil {
			return fmt.Errorf("open sessions: %w", err)
		}
	}
	return nil
}
