// Package config holds quota-center's configuration: typed, nested structs
// with documented defaults, filled from command-line flags and QC_
// environment variables (flag --http-addr ⇔ QC_HTTP_ADDR) by
// peterbourgon/ff. Packages receive their own sub-config; none of them read
// the environment.
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
	Quota   Quota
	Log     Log
	Dev     Dev
	// MigrateOnStart applies the ledger migrations before serving.
	MigrateOnStart bool
	// ShutdownGrace bounds how long in-flight requests may finish on stop.
	ShutdownGrace time.Duration
}

// HTTP configures the listener and its timeouts.
type HTTP struct {
	Addr              string
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxBodyBytes      int64 // bytes; larger bodies get 413
}

// Redis configures the balance store.
type Redis struct {
	Addr     string
	Password string
	DB       int
	Timeout  time.Duration // per command (read and write)
	PoolSize int
}

// MySQL configures the ledger and policy store.
type MySQL struct {
	DSN          string // go-sql-driver form: user:pass@tcp(host:3306)/db
	Timeout      time.Duration
	MaxOpenConns int
}

// Breaker configures the circuit breakers in front of Redis and MySQL.
type Breaker struct {
	Failures uint32        // consecutive backend failures that open a breaker
	OpenFor  time.Duration // how long it stays open before a probe
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
}

// Log configures zap.
type Log struct {
	Level  string // debug, info, warn, error
	Format string // json or console
}

// Dev configures the embedded dev mode (no QC_REDIS_ADDR, no QC_MYSQL_DSN).
type Dev struct {
	SQLitePath string // ":memory:" keeps nothing on exit
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		HTTP: HTTP{
			Addr: ":8080", ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 15 * time.Second, IdleTimeout: 120 * time.Second, MaxBodyBytes: 1 << 20,
		},
		Redis:          Redis{Timeout: 500 * time.Millisecond, PoolSize: 64},
		MySQL:          MySQL{Timeout: 2 * time.Second, MaxOpenConns: 32},
		Sweeper:        Sweeper{Interval: 5 * time.Second, Batch: 500},
		Breaker:        Breaker{Failures: 5, OpenFor: 5 * time.Second},
		Quota:          Quota{FinishedRetention: 24 * time.Hour, PolicyCacheTTL: 2 * time.Second},
		Log:            Log{Level: "info", Format: "json"},
		Dev:            Dev{SQLitePath: ":memory:"},
		ShutdownGrace:  15 * time.Second,
		MigrateOnStart: false,
	}
}

// DevMode reports whether no backend is configured: serve then runs on the
// embedded backends.
func (c Config) DevMode() bool { return c.Redis.Addr == "" && c.MySQL.DSN == "" }

// Load parses args (flags) and QC_ environment variables over Default().
// Flags win over the environment. It returns the usage text on -h as
// flag.ErrHelp.
func Load(name string, args []string) (Config, *flag.FlagSet, error) {
	c := Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&c.HTTP.Addr, "http-addr", c.HTTP.Addr, "HTTP listen address")
	fs.DurationVar(&c.HTTP.ReadHeaderTimeout, "http-read-header-timeout", c.HTTP.ReadHeaderTimeout, "time to read request headers")
	fs.DurationVar(&c.HTTP.ReadTimeout, "http-read-timeout", c.HTTP.ReadTimeout, "time to read a whole request")
	fs.DurationVar(&c.HTTP.WriteTimeout, "http-write-timeout", c.HTTP.WriteTimeout, "time to write a response")
	fs.DurationVar(&c.HTTP.IdleTimeout, "http-idle-timeout", c.HTTP.IdleTimeout, "keep-alive idle timeout")
	fs.Int64Var(&c.HTTP.MaxBodyBytes, "http-max-body-bytes", c.HTTP.MaxBodyBytes, "largest request body in bytes (larger gets 413)")
	fs.StringVar(&c.Redis.Addr, "redis-addr", c.Redis.Addr, "Redis host:port (empty with an empty mysql-dsn = dev mode)")
	fs.StringVar(&c.Redis.Password, "redis-password", c.Redis.Password, "Redis password")
	fs.IntVar(&c.Redis.DB, "redis-db", c.Redis.DB, "Redis database index")
	fs.DurationVar(&c.Redis.Timeout, "redis-timeout", c.Redis.Timeout, "Redis per-command timeout")
	fs.IntVar(&c.Redis.PoolSize, "redis-pool-size", c.Redis.PoolSize, "Redis connection pool size")
	fs.StringVar(&c.MySQL.DSN, "mysql-dsn", c.MySQL.DSN, "MySQL DSN, go-sql-driver form user:pass@tcp(host:3306)/db")
	fs.DurationVar(&c.MySQL.Timeout, "mysql-timeout", c.MySQL.Timeout, "MySQL per-query timeout")
	fs.IntVar(&c.MySQL.MaxOpenConns, "mysql-max-open-conns", c.MySQL.MaxOpenConns, "MySQL connection pool size")
	fs.BoolVar(&c.MigrateOnStart, "migrate-on-start", c.MigrateOnStart, "apply ledger migrations before serving")
	fs.Func("breaker-failures", "consecutive backend failures that open a circuit breaker (default 5)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		c.Breaker.Failures = uint32(n)
		return err
	})
	fs.DurationVar(&c.Breaker.OpenFor, "breaker-open-for", c.Breaker.OpenFor, "how long an open circuit breaker waits before a probe")
	fs.DurationVar(&c.Sweeper.Interval, "sweep-interval", c.Sweeper.Interval, "how often the leak sweeper runs")
	fs.IntVar(&c.Sweeper.Batch, "sweep-batch", c.Sweeper.Batch, "sessions swept per script call")
	fs.DurationVar(&c.Quota.FinishedRetention, "finished-retention", c.Quota.FinishedRetention, "how long settled sessions stay in Redis for cheap repeats and late true-ups")
	fs.DurationVar(&c.Quota.PolicyCacheTTL, "policy-cache-ttl", c.Quota.PolicyCacheTTL, "how long a policy read from MySQL is reused")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long in-flight requests may finish on stop")
	fs.StringVar(&c.Log.Level, "log-level", c.Log.Level, "debug, info, warn or error")
	fs.StringVar(&c.Log.Format, "log-format", c.Log.Format, "json or console")
	fs.StringVar(&c.Dev.SQLitePath, "dev-sqlite-path", c.Dev.SQLitePath, "dev mode ledger file (:memory: keeps nothing)")
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("QC")); err != nil {
		return c, fs, err
	}
	if name == "migrate" {
		return c, fs, c.validate(false)
	}
	return c, fs, c.Validate()
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
		"breaker-open-for": c.Breaker.OpenFor,
	} {
		if d <= 0 {
			bad("%s must be positive, got %s", name, d)
		}
	}
	if c.HTTP.MaxBodyBytes < 1024 {
		bad("http-max-body-bytes must be at least 1024")
	}
	if c.Breaker.Failures < 1 {
		bad("breaker-failures must be at least 1")
	}
	if c.Redis.PoolSize < 1 || c.MySQL.MaxOpenConns < 1 || c.Sweeper.Batch < 1 {
		bad("redis-pool-size, mysql-max-open-conns and sweep-batch must be at least 1")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level must be debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "console" {
		bad("log-format must be json or console, got %q", c.Log.Format)
	}
	return errors.Join(errs...)
}

// Redacted returns the config with secrets masked, for the start-up log line.
func (c Config) Redacted() Config {
	if c.Redis.Password != "" {
		c.Redis.Password = "***"
	}
	c.MySQL.DSN = RedactDSN(c.MySQL.DSN)
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
