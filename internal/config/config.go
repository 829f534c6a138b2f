package config

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"
)

// Config is the whole configuration of `quota-center serve` and `migrate`.
type Config struct {
	HTTP    HTTP
	Redis   Redis
	MySQL   MySQL
	Sweeper Sweeper
	Breaker Breaker
	// Reconcile configures the Redis-vs-ledger reconciliation job.
	Reconcile Reconcile
	Quota     Quota
	// Ledger configures the ledger's lifecycle job (internal/lifecycle).
	Ledger Ledger
	Log    Log
	Dev    Dev
	Auth   Auth
	// GRPC is the Envoy rate limit service listener (off by default).
	GRPC GRPC
	// Scale: what is done per resource (active resources only).
	Scale Scale
	// MigrateOnStart applies the ledger migrations before serving.
	MigrateOnStart bool
	// ShutdownGrace bounds how long in-flight requests may finish on stop.
	ShutdownGrace time.Duration
	// ShutdownDrain is how long /readyz answers 503 on stop, with the
	// listener still serving, before it closes: time for load balancers to
	// stop sending new requests (0 = close at once; Kubernetes' preStop
	// sleep does the same job).
	ShutdownDrain time.Duration
}

// HTTP configures the listener and its timeouts.
type HTTP struct {
	Addr              string
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxBodyBytes      int64 // bytes; larger bodies get 413
	// Engine serves the connections: "fasthttp" (the default) or "net/http"
	// (internal/httpserve; docs/operations.md, "HTTP engine").
	Engine string
	// PprofAddr, when set, serves net/http/pprof (CPU, heap, allocations,
	// goroutines) on its own listener, e.g. 127.0.0.1:6060; keep it off
	// public networks. Empty = off.
	PprofAddr string
}

// Redis configures the balance store.
type Redis struct {
	// Addr is host:port, or a comma-separated list of them: the seed nodes
	// of a Redis Cluster (any of its nodes) or the Sentinels (see Mode).
	Addr string
	// Mode is standalone (one server, Addr is one host:port), cluster
	// (Redis Cluster) or sentinel (the master that Sentinels at Addr name
	// MasterName). Empty means standalone.
	Mode       string
	MasterName string // the Sentinel master name; sentinel mode only
	// SentinelPassword authenticates to the Sentinels ("" = none); Password
	// is the master's and replicas'.
	SentinelPassword string
	Password         string
	DB               int
	Timeout          time.Duration // per command (read and write)
	PoolSize         int
	// PipelineMaxCalls is the most apply/heartbeat/finish script calls sent
	// to Redis in one auto-pipeline (0 = one round trip per call).
	PipelineMaxCalls int
	// PipelineInterval is the least time between two auto-pipelines'
	// sends (redisstore.Pipelining.Interval; a call after a quiet interval
	// is sent at once). 0 = none.
	PipelineInterval time.Duration
	// BatchApplies sends the new sessions of one plain resource's period
	// in a pipeline as one script call (redisstore.Pipelining.BatchApplies:
	// ~16 % less Redis CPU per apply on a hot resource). Default on.
	BatchApplies bool
	// WaitReplicas, when above 0, makes every state-changing script call
	// wait (Redis WAIT) until that many replicas of its master acknowledged
	// it, at most WaitTimeout, before it is answered: a failover to such a
	// replica then loses no answered change (docs/reliability.md).
	WaitReplicas int
	WaitTimeout  time.Duration
	// SessionRecord is the form apply writes a new session in: packed (the
	// default: six hash fields instead of eleven, ~11k fewer Redis
	// instructions per apply) or hash (one field each, as builds before
	// the packed record wrote it). This build reads both; set hash during
	// a rolling upgrade from an older build, until none is left
	// (redisstore.Store.HashSessions; docs/operations.md, "Running it").
	SessionRecord string
}

// The session record forms (Redis.SessionRecord).
const (
	SessionRecordPacked = "packed"
	SessionRecordHash   = "hash"
)

// MySQL configures the ledger and policy store.
type MySQL struct {
	DSN          string // go-sql-driver form: user:pass@tcp(host:3306)/db
	Timeout      time.Duration
	MaxOpenConns int
	// GroupCommitRows and GroupCommitWait bound one group commit of ledger
	// inserts or finishes: at most this many rows, and the first row waits
	// at most this long for company while a statement slot is free
	// (default 0: not at all; the group commit is adaptive without it).
	GroupCommitRows int
	GroupCommitWait time.Duration
}

// Breaker configures the circuit breakers in front of Redis and MySQL.
type Breaker struct {
	Failures uint32        // consecutive backend failures that open a breaker
	OpenFor  time.Duration // how long it stays open before a probe
}

// Reconcile configures reconciliation (internal/reconcile).
type Reconcile struct {
	Interval time.Duration // between passes over every resource
	Grace    time.Duration // a reservation younger than this may still be writing its ledger row
	Settle   time.Duration // time between the two drift reads
}

// Sweeper configures the leak sweeper.
type Sweeper struct {
	Interval time.Duration
	Batch    int // sessions per sweep script call
}

// Quota configures the domain service.
type Quota struct {
	FinishedRetention time.Duration
	PolicyCacheTTL    time.Duration
	// LineCloseBound is how long a business line's DELETE may keep the
	// line closed to new sessions (its closing mark's lifetime in Redis):
	// a DELETE that dies midway leaves the line usable again after it, and
	// one that takes longer fails (503) instead of deleting the line.
	LineCloseBound time.Duration
	// GlobalSessionIDs: no scoped session ids (quota.Options.GlobalSessionIDs),
	// for a rolling upgrade from a version without them.
	GlobalSessionIDs bool
}

// Ledger configures the ledger's lifecycle (internal/lifecycle): rollup of
// settled rows into hourly sums, then deletion past the retention.
type Ledger struct {
	Interval    time.Duration // between passes
	RollupAfter time.Duration // how long a settled LEAKED or CANCELLED row holds the rollup back
	Retention   time.Duration // raw rows kept (by start); 0 = forever
	Batch       int           // rows per rollup step
	DeleteBatch int           // rows per delete step
	Pause       time.Duration // between two steps
	DryRun      bool          // report what a pass would do, write nothing
	// ClosedPeriodsOnly: no rollup inside the current period (lifecycle.Config).
	ClosedPeriodsOnly bool
}

// Log configures zap.
type Log struct {
	Level  string // debug, info, warn, error
	Format string // json or console
}

// Dev configures the embedded dev mode (no QC_REDIS_ADDR, no QC_MYSQL_DSN).
type Dev struct {
	SQLitePath string // ":memory:" keeps nothing on exit
	// InsecureNonLoopback lets dev mode listen on an address that is not
	// loopback (QC_DEV_INSECURE_NON_LOOPBACK); without it such an address
	// is a configuration error (validateDevListen).
	InsecureNonLoopback bool
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		HTTP: HTTP{
			Addr: ":8080", ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 15 * time.Second, IdleTimeout: 120 * time.Second, MaxBodyBytes: 1 << 20,
			Engine: "fasthttp",
		},
		Redis:     Redis{Mode: RedisStandalone, Timeout: 500 * time.Millisecond, PoolSize: 64, PipelineMaxCalls: 128, PipelineInterval: 500 * time.Microsecond, BatchApplies: true, WaitTimeout: 100 * time.Millisecond, SessionRecord: SessionRecordPacked},
		MySQL:     MySQL{Timeout: 2 * time.Second, MaxOpenConns: 32, GroupCommitRows: 100, GroupCommitWait: 0},
		Sweeper:   Sweeper{Interval: 5 * time.Second, Batch: 500},
		Breaker:   Breaker{Failures: 5, OpenFor: 5 * time.Second},
		Reconcile: Reconcile{Interval: time.Minute, Grace: 30 * time.Second, Settle: 3 * time.Second},
		Quota:     Quota{FinishedRetention: 24 * time.Hour, PolicyCacheTTL: 2 * time.Second, LineCloseBound: 30 * time.Second},
		Ledger: Ledger{Interval: time.Hour, RollupAfter: 25 * time.Hour, Retention: 90 * 24 * time.Hour,
			Batch: 10000, DeleteBatch: 10000, Pause: 100 * time.Millisecond},
		Log:            Log{Level: "info", Format: "json"},
		Dev:            Dev{SQLitePath: ":memory:"},
		Scale:          Scale{ActiveWindow: 15 * time.Minute},
		ShutdownGrace:  15 * time.Second,
		MigrateOnStart: false,
	}
}

// DevHTTPAddr is where dev mode listens unless --http-addr (QC_HTTP_ADDR)
// says otherwise: loopback only, since dev mode's admin and client
// endpoints are open to whoever reaches them.
const DevHTTPAddr = "127.0.0.1:8080"

// defaultHTTPAddr is c.HTTP.Addr, or DevHTTPAddr in dev mode when neither
// the flag nor QC_HTTP_ADDR set it (ff sets flags from the environment, so
// Visit sees both).
func defaultHTTPAddr(c Config, fs *flag.FlagSet) string {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "http-addr" })
	if !set && c.DevMode() {
		return DevHTTPAddr
	}
	return c.HTTP.Addr
}

// DevMode reports whether no backend is configured: serve then runs on the
// embedded backends.
func (c Config) DevMode() bool { return c.Redis.Addr == "" && c.MySQL.DSN == "" }

// Load parses args (flags) and QC_ environment variables over Default().
// Flags win over the environment. It returns the usage text on -h as
// flag.ErrHelp.
func Load(name string, args []string) (Config, *flag.FlagSet, error) {
	return LoadWith(name, args, nil)
}

// LoadWith is Load for a command with flags of its own: more (if not nil)
// declares them on the flag set before parsing, so that they share its
// usage text and errors (and, like every flag, may come from QC_
// variables). Every command but serve needs MySQL only and does not parse
// the admin tokens or API keys.
func LoadWith(name string, args []string, more func(*flag.FlagSet)) (Config, *flag.FlagSet, error) {
	c := Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if more != nil {
		more(fs)
	}
	fs.StringVar(&c.HTTP.Addr, "http-addr", c.HTTP.Addr, "HTTP listen address")
	fs.DurationVar(&c.HTTP.ReadHeaderTimeout, "http-read-header-timeout", c.HTTP.ReadHeaderTimeout, "time to read request headers")
	fs.DurationVar(&c.HTTP.ReadTimeout, "http-read-timeout", c.HTTP.ReadTimeout, "time to read a whole request")
	fs.DurationVar(&c.HTTP.WriteTimeout, "http-write-timeout", c.HTTP.WriteTimeout, "time to write a response")
	fs.DurationVar(&c.HTTP.IdleTimeout, "http-idle-timeout", c.HTTP.IdleTimeout, "keep-alive idle timeout")
	fs.StringVar(&c.HTTP.Engine, "http-engine", c.HTTP.Engine, "what serves the HTTP connections: fasthttp (less CPU per request) or net/http")
	fs.StringVar(&c.HTTP.PprofAddr, "pprof-addr", c.HTTP.PprofAddr, "serve /debug/pprof on this address (empty = off; keep it private)")
	fs.Int64Var(&c.HTTP.MaxBodyBytes, "http-max-body-bytes", c.HTTP.MaxBodyBytes, "largest request body in bytes (larger gets 413)")
	fs.StringVar(&c.Redis.Addr, "redis-addr", c.Redis.Addr, "Redis host:port, or a comma-separated list for cluster and sentinel modes (empty with an empty mysql-dsn = dev mode)")
	fs.StringVar(&c.Redis.Mode, "redis-mode", c.Redis.Mode, "standalone, cluster (Redis Cluster; redis-addr lists seed nodes) or sentinel (redis-addr lists the Sentinels)")
	fs.StringVar(&c.Redis.MasterName, "redis-master", c.Redis.MasterName, "the Sentinel master name (sentinel mode only)")
	fs.StringVar(&c.Redis.SentinelPassword, "redis-sentinel-password", c.Redis.SentinelPassword, "password of the Sentinels (sentinel mode)")
	fs.StringVar(&c.Redis.Password, "redis-password", c.Redis.Password, "Redis password")
	fs.IntVar(&c.Redis.DB, "redis-db", c.Redis.DB, "Redis database index")
	fs.DurationVar(&c.Redis.Timeout, "redis-timeout", c.Redis.Timeout, "Redis per-command timeout")
	fs.IntVar(&c.Redis.PoolSize, "redis-pool-size", c.Redis.PoolSize, "Redis connection pool size")
	fs.IntVar(&c.Redis.WaitReplicas, "redis-wait-replicas", c.Redis.WaitReplicas, "replicas that must acknowledge each state-changing script call before it is answered (Redis WAIT; 0 = do not wait)")
	fs.DurationVar(&c.Redis.WaitTimeout, "redis-wait-timeout", c.Redis.WaitTimeout, "longest wait for redis-wait-replicas; a call not acknowledged by then is answered anyway and counted")
	fs.IntVar(&c.Redis.PipelineMaxCalls, "redis-pipeline-max-calls", c.Redis.PipelineMaxCalls, "most apply/heartbeat/finish script calls of concurrent requests sent to Redis as one pipeline (0 = one round trip each)")
	fs.DurationVar(&c.Redis.PipelineInterval, "redis-pipeline-interval", c.Redis.PipelineInterval, "least time between two auto-pipelines sent to Redis: under load, calls wait up to this long and share fewer, larger pipelines (a call after a quiet interval is sent at once; 0 = none)")
	fs.BoolVar(&c.Redis.BatchApplies, "redis-batch-applies", c.Redis.BatchApplies, "send the new sessions of one plain resource's period in a pipeline as one script call (false = one apply script call each)")
	fs.StringVar(&c.Redis.SessionRecord, "redis-session-record", c.Redis.SessionRecord, "form of a new session in Redis: packed (fewer Redis instructions per apply) or hash (readable by builds before the packed record: set it during a rolling upgrade from one)")
	fs.StringVar(&c.MySQL.DSN, "mysql-dsn", c.MySQL.DSN, "MySQL DSN, go-sql-driver form user:pass@tcp(host:3306)/db")
	fs.DurationVar(&c.MySQL.Timeout, "mysql-timeout", c.MySQL.Timeout, "MySQL per-query timeout")
	fs.IntVar(&c.MySQL.MaxOpenConns, "mysql-max-open-conns", c.MySQL.MaxOpenConns, "MySQL connection pool size")
	fs.IntVar(&c.MySQL.GroupCommitRows, "mysql-group-commit-rows", c.MySQL.GroupCommitRows, "most ledger rows written by one group-commit statement (1-1000)")
	fs.DurationVar(&c.MySQL.GroupCommitWait, "mysql-group-commit-wait", c.MySQL.GroupCommitWait, "extra time the first row of a group commit waits for company while a statement slot is free (0 = not at all: the group is what arrived while the statements before it were in flight)")
	fs.BoolVar(&c.MigrateOnStart, "migrate-on-start", c.MigrateOnStart, "apply ledger migrations before serving")
	fs.Func("breaker-failures", "consecutive backend failures that open a circuit breaker (default 5)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		c.Breaker.Failures = uint32(n)
		return err
	})
	fs.DurationVar(&c.Breaker.OpenFor, "breaker-open-for", c.Breaker.OpenFor, "how long an open circuit breaker waits before a probe")
	fs.DurationVar(&c.Reconcile.Interval, "reconcile-interval", c.Reconcile.Interval, "how often Redis is reconciled with the ledger")
	fs.DurationVar(&c.Reconcile.Grace, "reconcile-grace", c.Reconcile.Grace, "age before a Redis reservation without a ledger row is given back")
	fs.DurationVar(&c.Reconcile.Settle, "reconcile-settle", c.Reconcile.Settle, "time between the two balance reads before a drift is corrected")
	fs.DurationVar(&c.Sweeper.Interval, "sweep-interval", c.Sweeper.Interval, "how often the leak sweeper runs")
	fs.IntVar(&c.Sweeper.Batch, "sweep-batch", c.Sweeper.Batch, "sessions swept per script call")
	fs.DurationVar(&c.Quota.FinishedRetention, "finished-retention", c.Quota.FinishedRetention, "how long settled sessions stay in Redis for cheap repeats and late true-ups")
	fs.DurationVar(&c.Quota.LineCloseBound, "line-close-bound", c.Quota.LineCloseBound, "how long a business line's DELETE may keep the line closed to new sessions: a DELETE that dies midway frees the line after this, one that takes longer fails (1s to 10m)")
	fs.DurationVar(&c.Quota.PolicyCacheTTL, "policy-cache-ttl", c.Quota.PolicyCacheTTL, "how long a policy read from MySQL is reused (changes are also announced to every instance at once; this bounds a missed announcement)")
	fs.BoolVar(&c.Quota.GlobalSessionIDs, "global-session-ids", c.Quota.GlobalSessionIDs,
		"one session-id namespace for all clients, as before ids were scoped to client and resource (another client's id is a 409): set it while instances of an older version still serve")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long in-flight requests may finish on stop")
	fs.DurationVar(&c.ShutdownDrain, "shutdown-drain", c.ShutdownDrain, "how long /readyz answers 503 before the listener closes on stop (0 = at once)")
	ledgerFlags(fs, &c.Ledger)
	fs.StringVar(&c.Log.Level, "log-level", c.Log.Level, "debug, info, warn or error")
	fs.StringVar(&c.Log.Format, "log-format", c.Log.Format, "json or console")
	fs.StringVar(&c.Dev.SQLitePath, "dev-sqlite-path", c.Dev.SQLitePath, "dev mode ledger file (:memory: keeps nothing)")
	fs.BoolVar(&c.Dev.InsecureNonLoopback, "dev-insecure-non-loopback", c.Dev.InsecureNonLoopback,
		"dev mode: allow an http-addr or grpc-addr that is not loopback (dev mode keeps nothing and its endpoints may be open; refused without this)")
	grpcFlags(fs, &c.GRPC)
	scaleFlags(fs, &c.Scale)
	// Parsed below, for serve only, so that no flag error can quote a secret.
	var adminTokens, apiKeys string
	fs.StringVar(&adminTokens, "admin-tokens", "", "admin bearer tokens, comma-separated name:token (a bare token is named admin; 16+ characters); "+
		"none: /admin/* is open in dev mode and refused in production")
	fs.StringVar(&apiKeys, "api-keys", "", "client API keys (X-API-Key), semicolon-separated key=clientId:res1,res2 or key=clientId:* (16+ characters); "+
		"none: /quota/* is open in dev mode; production refuses to start unless --insecure-open-quota")
	fs.BoolVar(&c.Auth.InsecureOpenQuota, "insecure-open-quota", false,
		"production without api-keys: leave /quota/* open to anyone who can reach it (an explicit choice; refused together with api-keys)")
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("QC")); err != nil {
		return c, fs, err
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first non-flag: every flag after it
		// would be silently dropped (e.g. "--migrate-on-start true" leaves
		// "true" and ignores the backends that follow, starting dev mode).
		return c, fs, fmt.Errorf("unexpected argument %q: flags only (a bool flag takes --name or --name=false, not a separate value)", fs.Arg(0))
	}
	if name != "serve" {
		return c, fs, c.validate(false)
	}
	c.HTTP.Addr = defaultHTTPAddr(c, fs)
	var terr, kerr error
	c.Auth.AdminTokens, terr = ParseAdminTokens(adminTokens)
	c.Auth.APIKeys, kerr = ParseAPIKeys(apiKeys)
	return c, fs, errors.Join(terr, kerr, c.Validate())
}

// Validate checks the configuration of `serve`; it returns every problem
// found.
func (c Config) Validate() error { return c.validate(true) }

// validate checks the configuration; backendsPaired requires Redis and MySQL
// to be both set or both empty (serve; migrate needs MySQL only).
func (c Config) validate(backendsPaired bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if backendsPaired && (c.Redis.Addr == "") != (c.MySQL.DSN == "") {
		bad("set both QC_REDIS_ADDR and QC_MYSQL_DSN for production, or neither for dev mode")
	}
	if c.HTTP.Addr == "" {
		bad("http-addr must not be empty")
	}
	for name, d := range map[string]time.Duration{
		"http-read-header-timeout": c.HTTP.ReadHeaderTimeout, "http-read-timeout": c.HTTP.ReadTimeout,
		"http-write-timeout": c.HTTP.WriteTimeout, "http-idle-timeout": c.HTTP.IdleTimeout,
		"redis-timeout": c.Redis.Timeout, "mysql-timeout": c.MySQL.Timeout,
		"sweep-interval": c.Sweeper.Interval, "finished-retention": c.Quota.FinishedRetention,
		"policy-cache-ttl": c.Quota.PolicyCacheTTL, "shutdown-grace": c.ShutdownGrace,
		"breaker-open-for": c.Breaker.OpenFor, "reconcile-interval": c.Reconcile.Interval,
		"reconcile-grace": c.Reconcile.Grace, "reconcile-settle": c.Reconcile.Settle,
	} {
		if d <= 0 {
			bad("%s must be positive, got %s", name, d)
		}
	}
	if c.Quota.LineCloseBound < time.Second || c.Quota.LineCloseBound > 10*time.Minute {
		bad("line-close-bound must be between 1s and 10m, got %s", c.Quota.LineCloseBound)
	}
	if c.ShutdownDrain < 0 {
		bad("shutdown-drain must not be negative")
	}
	if c.HTTP.Engine != "fasthttp" && c.HTTP.Engine != "net/http" {
		bad("http-engine must be fasthttp or net/http, got %q", c.HTTP.Engine)
	}
	if c.HTTP.MaxBodyBytes < 1024 {
		bad("http-max-body-bytes must be at least 1024")
	}
	if c.Breaker.Failures < 1 {
		bad("breaker-failures must be at least 1")
	}
	if c.Redis.DB < 0 {
		bad("redis-db must be 0 or more")
	}
	errs = append(errs, c.Redis.validate()...)
	if c.Redis.PoolSize < 1 || c.MySQL.MaxOpenConns < 1 || c.Sweeper.Batch < 1 {
		bad("redis-pool-size, mysql-max-open-conns and sweep-batch must be at least 1")
	}
	if c.MySQL.GroupCommitRows < 1 || c.MySQL.GroupCommitRows > 1000 {
		bad("mysql-group-commit-rows must be between 1 and 1000")
	}
	if c.MySQL.GroupCommitWait < 0 || c.MySQL.GroupCommitWait > time.Second {
		bad("mysql-group-commit-wait must be between 0 and 1s")
	}
	if c.Redis.PipelineMaxCalls < 0 || c.Redis.PipelineMaxCalls > 10000 {
		bad("redis-pipeline-max-calls must be between 0 and 10000")
	}
	if c.Redis.PipelineInterval < 0 || c.Redis.PipelineInterval > 100*time.Millisecond {
		bad("redis-pipeline-interval must be between 0 and 100ms")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level must be debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "console" {
		bad("log-format must be json or console, got %q", c.Log.Format)
	}
	errs = append(errs, c.Ledger.validate(c.Quota.FinishedRetention)...)
	errs = append(errs, c.Auth.validate()...)
	errs = append(errs, c.GRPC.validate()...)
	errs = append(errs, c.Scale.validate()...)
	if backendsPaired {
		errs = append(errs, c.validateDevListen()...)
		switch {
		case !c.DevMode() && len(c.Auth.APIKeys) == 0 && !c.Auth.InsecureOpenQuota:
			bad("QC_API_KEYS is empty: in production /quota/* would be open to anyone who can reach it; " +
				"set QC_API_KEYS, or QC_INSECURE_OPEN_QUOTA=true to leave it open on purpose")
		case len(c.Auth.APIKeys) > 0 && c.Auth.InsecureOpenQuota:
			bad("QC_INSECURE_OPEN_QUOTA=true contradicts QC_API_KEYS: /quota/* cannot be both open and keyed; unset one")
		}
	}
	return errors.Join(errs...)
}

// Redacted returns the config with secrets masked, for the start-up log
// line: passwords, admin tokens and API keys become "***"; token names,
// client ids and resources stay.
func (c Config) Redacted() Config {
	if c.Redis.Password != "" {
		c.Redis.Password = "***"
	}
	if c.Redis.SentinelPassword != "" {
		c.Redis.SentinelPassword = "***"
	}
	c.MySQL.DSN = RedactDSN(c.MySQL.DSN)
	// New slices: c shares its backing arrays with the caller's Config.
	tokens := make([]AdminToken, len(c.Auth.AdminTokens))
	for i, t := range c.Auth.AdminTokens {
		tokens[i] = AdminToken{Name: t.Name, Token: Secret(t.Token.masked())}
	}
	keys := make([]APIKey, len(c.Auth.APIKeys))
	for i, k := range c.Auth.APIKeys {
		k.Key = Secret(k.Key.masked())
		k.Resources = append([]string(nil), k.Resources...)
		keys[i] = k
	}
	c.Auth = Auth{AdminTokens: tokens, APIKeys: keys, InsecureOpenQuota: c.Auth.InsecureOpenQuota}
	return c
}

// RedactDSN masks the password of a go-sql-driver DSN (user:pass@…).
func RedactDSN(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	userinfo := dsn[:at]
	if colon := strings.Index(userinfo, ":"); colon >= 0 {
		return userinfo[:colon] + ":***" + dsn[at:]
	}
	return dsn
}
