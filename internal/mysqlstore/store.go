package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/migrations"
)

var (
	_ quota.Ledger      = (*Store)(nil)
	_ quota.PolicyStore = (*Store)(nil)
)

// Defaults of Options.
const (
	// DefaultMaxOpenConns is the default pool size, in connections.
	DefaultMaxOpenConns = 32
	// DefaultQueryTimeout is the default deadline of one call (2 s).
	DefaultQueryTimeout = 2 * time.Second
	// DefaultBatchMaxRows is the default size of one group commit, in rows.
	DefaultBatchMaxRows = 100
	// DefaultBatchMaxWait is how long, by default, the first row of a group
	// commit waits for company: not at all. The group commit is adaptive
	// (package group): a group is what arrived while the statements before
	// it were in flight, so a lone row is written at once and a crowd
	// shares one statement without any timer.
	DefaultBatchMaxWait = 0

	// maxBatchRows bounds BatchMaxRows so that one group-commit statement
	// (9 placeholders a row for an INSERT, 14 for a finish UPDATE) stays far
	// below the placeholder limits of MySQL (65535) and SQLite (32766).
	maxBatchRows = 1000
)

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// MaxOpenConns bounds the connection pool (default 32). An in-memory
	// SQLite store always uses a single connection.
	MaxOpenConns int
	// QueryTimeout is the deadline given to every call on top of the
	// caller's context, and to each group-commit statement (default 2s).
	QueryTimeout time.Duration
	// BatchMaxRows is the most rows one group commit (an INSERT of new
	// sessions, an UPDATE settling finished ones, or both in one
	// transaction) carries (default 100, at most 1000).
	BatchMaxRows int
	// BatchMaxWait is how long the first row of a group commit waits for
	// company while a statement slot is free (default 0 = not at all, as a
	// negative value). While every slot is busy, rows keep joining the
	// waiting group up to BatchMaxRows whatever this says (see package
	// group). A positive wait delays every lone row by that much; tests use
	// it to make a group of a known size.
	BatchMaxWait time.Duration
	// OnGroupCommit, when set, is told the rows of each group-commit
	// statement as it is sent: op is "insert" or "finish". It runs on the
	// statement's goroutine and must not block (a metric, say).
	OnGroupCommit func(op string, rows int)
	// AllowUnreachable: Open does not fail when the server cannot be
	// reached (its ping fails with quota.ErrUnavailable: a MySQL outage at
	// start, issue 22 §11); the store is returned and its pool connects on
	// first use. Other errors (a refused login, say) still fail. Ping tells
	// whether it answers.
	AllowUnreachable bool
}

func (o Options) withDefaults() Options {
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = DefaultMaxOpenConns
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = DefaultQueryTimeout
	}
	if o.BatchMaxRows <= 0 {
		o.BatchMaxRows = DefaultBatchMaxRows
	}
	if o.BatchMaxRows > maxBatchRows {
		o.BatchMaxRows = maxBatchRows
	}
	if o.BatchMaxWait < 0 {
		o.BatchMaxWait = DefaultBatchMaxWait
	}
	return o
}

// dialect holds what differs between the SQL backends; everything else is
// shared SQL.
type dialect struct {
	name  string
	goose goose.Dialect
	// migrations are the dialect's goose files at the root of the FS.
	migrations fs.FS
	// insertPolicyIfAbsent inserts a policy row and does nothing (0 rows
	// affected) when resource_name exists. Arguments: resource_name,
	// quota_type, total_limit, reset_cron, timezone, leak_threshold_seconds,
	// fail_mode, created_ms, updated_ms.
	insertPolicyIfAbsent string
	// lifecycle holds the ledger lifecycle's dialect parts (lifecycle.go).
	lifecycle lifecycleDialect
	// historyIndex follows "FROM quota_usage" in SessionHistory: MySQL's
	// FORCE INDEX (idx_quota_usage_start). Since migration 00010 the
	// period index (resource_name, period_start_ms, start_ms) holds
	// start_ms too, and MariaDB took it on small tables for the history's
	// start_ms range, then sorted every row of the resource.
	historyIndex string
	// periodTotals is the period totals statement (periodTotalsQuery).
	// MySQL's forces each table's index (FORCE INDEX): once a resource is
	// rolled up to its current period's start, the watermark's `start_ms
	// >= W` is a range of idx_quota_usage_start too, estimated at about the
	// period's rows, and MariaDB 10.11 took that index as `ref` on
	// resource_name alone and read every row the resource keeps (1 M rows
	// for 73 k at 10 M rows, 24 s; past the one-minute timeout at 60 M);
	// on idx_quota_usage_period it took `ref` on two columns and read a
	// period rolled up partway whole; on the rollups it took their primary
	// key's resource_name, every rollup row of the resource
	// (docs/performance.md, TestPeriodTotalsReadThePeriodFromTheWatermarkOnly).
	periodTotals string
}

const insertPolicyPrefix = `INSERT INTO quota_policy
	(resource_name, quota_type, total_limit, reset_cron, timezone, leak_threshold_seconds, fail_mode, created_ms, updated_ms)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

var (
	dialectMySQL = dialect{
		name:       "mysql",
		goose:      goose.DialectMySQL,
		migrations: mustSub(migrations.MySQL, "mysql"),
		// id = id changes nothing, so an existing row reports 0 rows
		// affected (ClientFoundRows is forced off in Open).
		insertPolicyIfAbsent: insertPolicyPrefix + ` ON DUPLICATE KEY UPDATE id = id`,
		lifecycle:            lifecycleMySQL,
		historyIndex:         ` FORCE INDEX (idx_quota_usage_start)`,
		periodTotals:         periodTotalsQuery(func(index string) string { return " FORCE INDEX (" + index + ")" }),
	}
)

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // dir is a constant that exists in the embedded FS
	}
	return sub
}

// Store is the SQL adapter: a quota.PolicyStore and a quota.Ledger over one
// connection pool. It is safe for concurrent use. Close it when done.
type Store struct {
	db      *sqlx.DB
	dialect dialect
	timeout time.Duration
	// inserts and finishes group-commit InsertSession and FinishSession.
	inserts  *batcher[quota.UsageRecord]
	finishes *batcher[quota.UsageRecord]
	// charges group-commits InsertCharges, one request's rows per item.
	charges *batcher[[]quota.UsageRecord]
	// insertStmts, finishStmts and chargeStmts run the statements of
	// inserts, finishes and charges (prepared on MySQL).
	insertStmts, finishStmts, chargeStmts *groupStmts
	// turns: on SQLite, a *sync.Mutex per resource that ChangePools and
	// InPoolsTurn hold around their Redis writes (poolturn.go).
	turns sync.Map
}

// Open connects to MySQL or MariaDB. dsn is a github.com/go-sql-driver/mysql
// DSN ("user:pass@tcp(host:3306)/dbname"); whatever it says, times are parsed
// in UTC, the session time zone is +00:00, placeholders are interpolated
// client-side (no prepare round trips) and ClientFoundRows is off. The server
// is pinged within opts.QueryTimeout. Errors: a DSN parse error, or an error
// wrapping quota.ErrUnavailable when the server cannot be reached (unless
// opts.AllowUnreachable).
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.InterpolateParams = true
	cfg.ClientFoundRows = false
	if cfg.Timeout == 0 {
		cfg.Timeout = opts.QueryTimeout // dial timeout
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql connector: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(opts.MaxOpenConns)
	db.SetMaxIdleConns(opts.MaxOpenConns)
	db.SetConnMaxLifetime(5 * time.Minute) // below common server/proxy idle limits
	db.SetConnMaxIdleTime(time.Minute)
	return newStore(ctx, sqlx.NewDb(db, "mysql"), dialectMySQL, opts)
}

func newStore(ctx context.Context, db *sqlx.DB, d dialect, opts Options) (*Store, error) {
	s := &Store{db: db, dialect: d, timeout: opts.QueryTimeout}
	prepare := d.name == dialectMySQL.name
	s.insertStmts = newGroupStmts(db.DB, prepare, insertSQL)
	s.finishStmts = newGroupStmts(db.DB, prepare, finishSQL)
	s.chargeStmts = newGroupStmts(db.DB, prepare, chargeSQL)
	if err := s.Ping(ctx); err != nil && !(opts.AllowUnreachable && errors.Is(err, quota.ErrUnavailable)) {
		_ = db.Close()
		return nil, err
	}
	s.inserts, s.finishes = s.newSessionBatchers(opts)
	s.charges = newBatcher(s.chargeOp(opts.OnGroupCommit), s.timeout, opts.BatchMaxRows, opts.BatchMaxWait)
	return s, nil
}

// Migrate applies the embedded migrations of the store's dialect that are
// not applied yet (package migrations); with none pending it does nothing.
// On MySQL it holds a named lock per database while it runs (GET_LOCK,
// waiting up to 5 minutes), so concurrent migrations run one at a time.
// It runs under ctx alone, without the query timeout, as DDL may be slow.
// Errors: the goose error, wrapping quota.ErrUnavailable when the database
// cannot be reached.
func (s *Store) Migrate(ctx context.Context) error {
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if s.dialect.goose == goose.DialectMySQL {
		// Processes starting together migrate one after the other.
		opts = append(opts, goose.WithSessionLocker(mysqlMigrateLock{wait: migrateLockWait}))
	}
	p, err := goose.NewProvider(s.dialect.goose, s.db.DB, s.dialect.migrations, opts...)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.dialect.name, err)
	}
	// No Provider.Close: it would close our *sql.DB.
	for attempt := 1; ; attempt++ {
		_, err := p.Up(ctx)
		if err == nil {
			return nil
		}
		// Several processes migrating a new database at once: one of them
		// now and then finds goose's version table without its zero row
		// (about 1 run in 50 of TestConcurrentMigrationsApplyEachOnce; the
		// others succeed and the row is there right after, so it is a
		// moment of another process' table creation, which goose itself
		// says can race: provider_run.go, tryEnsureVersionTable). Up is
		// idempotent: run it again.
		if attempt < migrateAttempts && strings.Contains(err.Error(), "missing zero version") {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		return translate(fmt.Sprintf("migrate %s", s.dialect.name), err)
	}
}

// migrateAttempts bounds Migrate's runs of goose's Up when it finds the
// version table without its zero row.
const migrateAttempts = 5

// Ping checks the database answers within the query timeout. Errors: one
// wrapping quota.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		err = translate("ping "+s.dialect.name, err)
		if !errors.Is(err, quota.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", quota.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// DB returns the underlying pool, for tests and health checks. Do not close
// it; use Close.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close stops the group-commit goroutines (a batch in flight is finished;
// later InsertSession and FinishSession calls fail with
// quota.ErrUnavailable), then closes the pool. It is safe to call more than
// once; it returns the pool's Close error.
func (s *Store) Close() error {
	s.inserts.stop()
	s.finishes.stop()
	s.charges.stop()
	s.insertStmts.close()
	s.finishStmts.close()
	s.chargeStmts.close()
	return s.db.Close()
}

func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// msOf converts t to Unix milliseconds (truncating below the millisecond).
func msOf(t time.Time) int64 { return t.UnixMilli() }

// timeOf converts Unix milliseconds to a UTC time.
func timeOf(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// nullMsOf is msOf with the zero time stored as NULL.
func nullMsOf(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}
