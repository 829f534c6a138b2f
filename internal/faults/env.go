package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quotacenter/quota-center/internal/app"
)

// DefaultServeArgs tune quota-center for fault injection: failures are
// detected in a fifth of a second, breakers re-probe after half a second,
// and the sweeper and reconciler run often enough to see their work within
// a short test.
var DefaultServeArgs = []string{
	"--log-level", "warn",
	"--redis-timeout", "200ms",
	"--mysql-timeout", "1s",
	"--breaker-failures", "5",
	"--breaker-open-for", "500ms",
	"--sweep-interval", "200ms",
	"--reconcile-interval", "1s",
	"--reconcile-grace", "2s",
	"--reconcile-settle", "300ms",
}

// EnvOptions configure StartEnv.
type EnvOptions struct {
	Dir       string   // where the servers keep their files and the service its log (required)
	Logf      Logf     // progress; nil = silent
	ServeArgs []string // flags after DefaultServeArgs (they win)
}

// Env is quota-center running in-process on private Redis and MariaDB.
type Env struct {
	Redis      *Redis
	Proxy      *Proxy // between quota-center and Redis (the service's --redis-addr)
	SQLProxy   *Proxy // between quota-center and MariaDB (the service's --mysql-dsn)
	MariaDB    *MariaDB
	Database   string  // the ledger database on MariaDB
	URL        string  // http://127.0.0.1:port
	AdminToken string  // bearer token of /admin/*
	Ledger     *sql.DB // direct read access to the ledger
	ServerLog  string  // path of the service's log
	HTTP       *http.Client

	logf           Logf
	dir            string
	settleLockHeld time.Duration // longest run of skipped reconcile passes Settle saw
	lockNote       string        // what lockDiagnosis found
	settleTook     time.Duration // how long Settle took
	cancel         context.CancelFunc
	done           chan error
}

// StartEnv starts the private servers and quota-center on them. Close it.
func StartEnv(ctx context.Context, o EnvOptions) (_ *Env, err error) {
	if o.Dir == "" {
		return nil, errors.New("faults: EnvOptions.Dir is required")
	}
	e := &Env{Database: "quota_center", logf: o.Logf, dir: o.Dir, HTTP: &http.Client{Timeout: 30 * time.Second}}
	defer func() {
		if err != nil {
			_ = e.Close()
		}
	}()
	if e.Redis, err = StartRedis(ctx, filepath.Join(o.Dir, "redis"), o.Logf); err != nil {
		return nil, err
	}
	if e.Proxy, err = StartProxy(e.Redis.Addr()); err != nil {
		return nil, err
	}
	if e.MariaDB, err = StartMariaDB(ctx, filepath.Join(o.Dir, "mariadb"), o.Logf); err != nil {
		return nil, err
	}
	if e.SQLProxy, err = StartProxy(e.MariaDB.Addr()); err != nil {
		return nil, err
	}
	if err = e.MariaDB.CreateDatabase(ctx, e.Database); err != nil {
		return nil, fmt.Errorf("create ledger database: %w", err)
	}
	if e.Ledger, err = sql.Open("mysql", e.MariaDB.DSN(e.Database)); err != nil {
		return nil, err
	}
	e.Ledger.SetMaxOpenConns(4)

	var tok [16]byte
	_, _ = rand.Read(tok[:])
	e.AdminToken = hex.EncodeToString(tok[:])
	e.ServerLog = filepath.Join(o.Dir, "quota-center.log")
	logOut, err := os.OpenFile(e.ServerLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--http-addr", "127.0.0.1:0",
		"--redis-addr", e.Proxy.Addr(),
		"--mysql-dsn", e.MariaDB.DSNAt(e.SQLProxy.Addr(), e.Database),
		"--migrate-on-start",
		"--admin-tokens", "faults:" + e.AdminToken,
	}
	args = append(append(args, DefaultServeArgs...), o.ServeArgs...)
	sctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		err := app.Serve(sctx, args, logOut, func(a string) { addr <- a })
		_ = logOut.Close()
		e.done <- err
	}()
	select {
	case a := <-addr:
		e.URL = "http://" + a
	case err := <-e.done:
		e.done <- err // for Close
		return nil, fmt.Errorf("quota-center did not start: %w", err)
	case <-time.After(60 * time.Second):
		return nil, errors.New("quota-center did not start within 60s")
	}
	o.Logf.printf("faults: quota-center on %s (log %s)", e.URL, e.ServerLog)
	return e, nil
}

// Close stops quota-center (bounded) and then the servers.
func (e *Env) Close() error {
	var errs []error
	if e.cancel != nil {
		e.cancel()
		select {
		case err := <-e.done:
			if err != nil {
				errs = append(errs, fmt.Errorf("quota-center stopped with: %w", err))
			}
		case <-time.After(40 * time.Second):
			errs = append(errs, errors.New("quota-center did not stop within 40s"))
		}
	}
	if e.Ledger != nil {
		_ = e.Ledger.Close()
	}
	if e.MariaDB != nil {
		errs = append(errs, e.MariaDB.Close())
	}
	if e.Proxy != nil {
		errs = append(errs, e.Proxy.Close())
	}
	if e.SQLProxy != nil {
		errs = append(errs, e.SQLProxy.Close())
	}
	if e.Redis != nil {
		errs = append(errs, e.Redis.Close())
	}
	return errors.Join(errs...)
}

// Admin sends an /admin request with the bearer token and decodes the JSON
// answer into out (when not nil). A non-2xx status is an error.
func (e *Env) Admin(ctx context.Context, method, path string, body, out any) error {
	code, raw, err := e.admin(ctx, method, path, body)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, code, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// admin sends an /admin request and returns the status and body.
func (e *Env) admin(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, nil
}

// Resource is one policy the workload uses.
type Resource struct {
	Name                 string
	Limit                int64  // totalLimit per period
	ResetCron            string // "" = never resets
	LeakThresholdSeconds int64
	MaxAmount            int64 // applies ask for 1 … MaxAmount
}

// PutPolicy creates (or replaces) r's policy: TOKENS, failMode CLOSED.
func (e *Env) PutPolicy(ctx context.Context, r Resource) error {
	return e.Admin(ctx, http.MethodPut, "/admin/policies/"+r.Name, map[string]any{
		"quotaType": "TOKENS", "totalLimit": r.Limit, "resetCron": r.ResetCron,
		"leakThresholdSeconds": r.LeakThresholdSeconds, "failMode": "CLOSED",
	}, nil)
}

// ReconcileReport is the part of a reconciliation report the checks read.
type ReconcileReport struct {
	Resource          string `json:"resource"`
	DriftCharged      int64  `json:"driftCharged"`
	DriftReserved     int64  `json:"driftReserved"`
	OrphansReleased   int    `json:"orphansReleased"`
	LedgerRowsSettled int    `json:"ledgerRowsSettled"`
	SessionsRestored  int    `json:"sessionsRestored"`
	BalanceAdjusted   bool   `json:"balanceAdjusted"`
	Skipped           string `json:"skipped"`
}

func (r ReconcileReport) String() string {
	s := fmt.Sprintf("%s: drift charged %+d reserved %+d, orphans released %d, ledger rows settled %d, sessions restored %d, adjusted %v",
		r.Resource, r.DriftCharged, r.DriftReserved, r.OrphansReleased, r.LedgerRowsSettled, r.SessionsRestored, r.BalanceAdjusted)
	if r.Skipped != "" {
		s += " (skipped: " + r.Skipped + ")"
	}
	return s
}

// Reconcile runs POST /admin/reconcile (every resource when name is "").
// A pass skipped for a held lock answers 409 RECONCILE_SKIPPED with the
// reports (the skipped ones say so): that is not an error here.
func (e *Env) Reconcile(ctx context.Context, name string) ([]ReconcileReport, error) {
	path := "/admin/reconcile"
	if name != "" {
		path += "?resourceName=" + name
	}
	code, raw, err := e.admin(ctx, http.MethodPost, path, nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Code    string            `json:"code"`
		Reports []ReconcileReport `json:"reports"`
	}
	if code != http.StatusOK && code != http.StatusConflict || json.Unmarshal(raw, &out) != nil ||
		code == http.StatusConflict && out.Code != "RECONCILE_SKIPPED" {
		return nil, fmt.Errorf("POST %s: %d %s", path, code, strings.TrimSpace(string(raw)))
	}
	return out.Reports, nil
}
