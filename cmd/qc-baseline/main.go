// Command qc-baseline is the "speed of Redis" reference for the load
// benchmark (scripts/bench.sh, docs/performance.md).
//
// It is a minimal net/http server that answers the same three calls as
// quota-center — POST /quota/apply, /quota/heartbeat and /quota/finish, with
// the same JSON shapes — by running the same Lua scripts once per request
// through redisstore.Store. It has none of the rest: no router, no policy
// lookup, no ledger, no metrics, no logging on the hot path. One resource,
// named by --resource, gets a single never-resetting period seeded at start
// with a huge limit.
//
//	qc-baseline --addr 127.0.0.1:18081 --redis-addr 127.0.0.1:6379 --resource bench-baseline
//
// With --mysql-dsn it is the benchmark's "baseline+ledger" server (the
// floor of a durable ledger): the same script calls, but sent through
// quota-center's own Redis path (internal/app's OpenRedis: the
// auto-pipelined store of quota-center serve, at its defaults), plus the
// session's ledger row written through quota-center's own group commit
// (internal/mysqlstore, its migrations applied at start) before an apply or
// a finish is answered; see ledger.go. Without it each script call is a
// round trip of its own.
//
//	qc-baseline --addr 127.0.0.1:18084 --resource bench-floor --mysql-dsn 'root@tcp(127.0.0.1:3306)/qc_floor'
//
// Use a resource name that quota-center does not use on the same Redis: the
// two would otherwise share balance keys.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quotacenter/quota-center/internal/app"
	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], nil)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "qc-baseline:", err)
		os.Exit(1)
	}
}

type settings struct {
	addr      string
	redisAddr string
	poolSize  int
	resource  string
	limit     int64
	lease     time.Duration
	retention time.Duration
	mysqlDSN  string
}

// run serves until ctx ends. onListen, when set, gets the bound address.
func run(ctx context.Context, args []string, onListen func(string)) error {
	var c settings
	fs := flag.NewFlagSet("qc-baseline", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:18081", "HTTP listen address")
	fs.StringVar(&c.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis host:port")
	fs.IntVar(&c.poolSize, "redis-pool-size", 64, "Redis connection pool size (quota-center's default is 64)")
	fs.StringVar(&c.resource, "resource", "bench-baseline", "the one resource this server serves (any resourceName in a request is ignored)")
	fs.Int64Var(&c.limit, "limit", quota.MaxAmount, "the resource's limit (huge by default: the benchmark never runs out)")
	fs.DurationVar(&c.lease, "lease", 300*time.Second, "session lease (quota-center's default leak threshold is 300s)")
	fs.DurationVar(&c.retention, "finished-retention", 24*time.Hour, "how long finished sessions stay in Redis (quota-center's default)")
	fs.StringVar(&c.mysqlDSN, "mysql-dsn", "", `ledger mode: MySQL/MariaDB DSN ("user:pass@tcp(host:3306)/dbname") of a database for quota-center's ledger schema (migrated at start); every apply and finish is answered only once its ledger row is committed (default none: no ledger)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := quota.ValidateResourceName(c.resource); err != nil {
		return err
	}

	// The ledger first: a bad DSN stops it before anything else starts.
	var ledger *mysqlstore.Store
	mode := "no ledger, one Redis round trip per call"
	if c.mysqlDSN != "" {
		st, err := openLedger(ctx, c.mysqlDSN) // under ctx alone: DDL may be slow
		if err != nil {
			return err
		}
		defer st.Close()
		ledger, mode = st, "ledger row per apply and finish, Redis calls auto-pipelined"
	}
	// quota-center's own Redis path (internal/app, its defaults), so that
	// the difference measured is the service, not the Redis client. The
	// baseline sends each script call on its own (one round trip each, the
	// speed of Redis); the ledger mode, the floor of a durable apply, sends
	// them auto-pipelined as quota-center serve does.
	rc := config.Default().Redis
	rc.Addr, rc.PoolSize = c.redisAddr, c.poolSize
	if ledger == nil {
		rc.PipelineMaxCalls = 0
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rdb, store, err := app.OpenRedis(sctx, rc)
	if err != nil {
		return err
	}
	defer rdb.Close()
	defer store.Close() // before the client: the pipelines in flight are answered
	b := &baseline{store: store, resource: c.resource, lease: c.lease, retention: c.retention, ledger: ledger}

	if err := b.seed(sctx, c.limit); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /quota/apply", b.apply)
	mux.HandleFunc("POST /quota/heartbeat", b.heartbeat)
	mux.HandleFunc("POST /quota/finish", b.finish)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	fmt.Fprintf(os.Stderr, "qc-baseline: listening on %s, resource %s, period %d, %s\n", ln.Addr(), c.resource, b.period.ID(), mode)
	if onListen != nil {
		onListen(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_ = srv.Shutdown(shctx)
	return nil
}

type baseline struct {
	store     *redisstore.Store
	resource  string
	period    quota.Period
	lease     time.Duration
	retention time.Duration
	// ledger, when set (--mysql-dsn), gets each apply's and finish's row
	// before the answer (ledger.go).
	ledger *mysqlstore.Store
}

// seed writes one never-ending period starting now, with zero totals, and
// sets the limit (SetLimit also overrides a limit left by an earlier run).
func (b *baseline) seed(ctx context.Context, limit int64) error {
	b.period = quota.Period{Start: time.Now().UTC().Truncate(time.Millisecond)}
	if _, err := b.store.Seed(ctx, b.resource, b.period, limit, quota.PeriodTotals{}, nil, time.Minute); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := b.store.SetLimit(ctx, b.resource, limit); err != nil {
		return fmt.Errorf("set limit: %w", err)
	}
	return nil
}

type applyRequest struct {
	ApplyAmount int64  `json:"applyAmount"`
	MinAmount   int64  `json:"minAmount"`
	ClientID    string `json:"clientId"`
	SessionID   string `json:"sessionId"`
}

type applyResponse struct {
	Success                  bool   `json:"success"`
	Code                     string `json:"code"`
	SessionID                string `json:"sessionId"`
	GrantedAmount            int64  `json:"grantedAmount"`
	RemainingQuota           int64  `json:"remainingQuota"`
	LeaseExpiresAt           string `json:"leaseExpiresAt"`
	HeartbeatIntervalSeconds int64  `json:"heartbeatIntervalSeconds"`
}

func (b *baseline) apply(w http.ResponseWriter, r *http.Request) {
	var req applyRequest
	if !decode(w, r, &req) {
		return
	}
	if req.ApplyAmount <= 0 {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "applyAmount must be at least 1")
		return
	}
	if req.SessionID == "" {
		req.SessionID = randomID()
	}
	cmd := quota.ApplyCmd{
		ResourceName: b.resource, SessionID: req.SessionID, ClientID: req.ClientID,
		Amount: req.ApplyAmount, MinAmount: req.MinAmount, Period: b.period,
		Lease: b.lease, FirstPeriod: true,
	}
	res, err := b.store.Apply(r.Context(), cmd)
	if err != nil {
		storeError(w, err)
		return
	}
	switch res.Outcome {
	case quota.ApplyGranted, quota.ApplyReplayed:
		if b.ledger != nil {
			if err := b.recordApply(r.Context(), cmd, res); err != nil {
				writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", err.Error())
				return
			}
		}
		writeJSON(w, http.StatusOK, applyResponse{
			Success: true, Code: "SUCCESS", SessionID: req.SessionID, GrantedAmount: res.Granted,
			RemainingQuota: res.Remaining, LeaseExpiresAt: res.LeaseExpiresAt.Format(time.RFC3339Nano),
			HeartbeatIntervalSeconds: int64(b.lease / time.Second / 3),
		})
	case quota.ApplyExhausted:
		writeError(w, http.StatusTooManyRequests, "QUOTA_EXHAUSTED", "quota exhausted")
	default:
		// Wrong period or missing balance: the seeded keys were removed.
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", fmt.Sprintf("store outcome %d: restart qc-baseline to reseed", res.Outcome))
	}
}

type sessionRequest struct {
	SessionID        string `json:"sessionId"`
	ClientID         string `json:"clientId"`
	ActualUsedAmount int64  `json:"actualUsedAmount"`
}

func (b *baseline) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req sessionRequest
	if !decode(w, r, &req) {
		return
	}
	exp, err := b.store.Heartbeat(r.Context(), b.resource, req.SessionID, req.ClientID, b.lease)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"success": true, "code": "SUCCESS", "sessionId": req.SessionID, "status": "USING",
		"leaseExpiresAt": exp.Format(time.RFC3339Nano),
	})
}

type finishResponse struct {
	Success        bool   `json:"success"`
	Code           string `json:"code"`
	SessionID      string `json:"sessionId"`
	GrantedAmount  int64  `json:"grantedAmount"`
	ChargedAmount  int64  `json:"chargedAmount"`
	RefundedAmount int64  `json:"refundedAmount"`
	OverageAmount  int64  `json:"overageAmount"`
	RemainingQuota int64  `json:"remainingQuota"`
}

func (b *baseline) finish(w http.ResponseWriter, r *http.Request) {
	var req sessionRequest
	if !decode(w, r, &req) {
		return
	}
	res, err := b.store.Finish(r.Context(), quota.FinishCmd{
		ResourceName: b.resource, SessionID: req.SessionID, ClientID: req.ClientID,
		Actual: req.ActualUsedAmount, Retention: b.retention,
	})
	if err != nil {
		storeError(w, err)
		return
	}
	if b.ledger != nil {
		if err := b.recordFinish(r.Context(), req.SessionID, res); err != nil {
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, finishResponse{
		Success: true, Code: "SUCCESS", SessionID: req.SessionID, GrantedAmount: res.Granted,
		ChargedAmount: res.Charged, RefundedAmount: res.Refunded, OverageAmount: res.Overage,
		RemainingQuota: res.Remaining,
	})
}

// decode reads a JSON body into v; it answers 400 and returns false when it
// cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "bad JSON body: "+err.Error())
		return false
	}
	return true
}

func storeError(w http.ResponseWriter, err error) {
	var na *quota.NotActiveError
	switch {
	case errors.Is(err, quota.ErrSessionNotFound):
		writeError(w, http.StatusNotFound, "SESSION_NOT_FOUND", err.Error())
	case errors.As(err, &na):
		writeError(w, http.StatusConflict, "SESSION_NOT_ACTIVE", err.Error())
	case errors.Is(err, quota.ErrSessionConflict):
		writeError(w, http.StatusConflict, "SESSION_CONFLICT", err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", err.Error())
	}
}

func writeError(w http.ResponseWriter, code int, name, msg string) {
	writeJSON(w, code, map[string]any{"success": false, "code": name, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
