package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/quotacenter/quota-center/internal/activity"
	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/breaker"
	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/console"
	"github.com/quotacenter/quota-center/internal/dev"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/httpserve"
	"github.com/quotacenter/quota-center/internal/lifecycle"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/policysync"
	"github.com/quotacenter/quota-center/internal/poolctl"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/redisstore"
	"github.com/quotacenter/quota-center/internal/sweeper"
)

// backends are the opened stores and how to close them.
type backends struct {
	rdb    redis.UniversalClient
	ledger *mysqlstore.Store
	close  func()
}

// openBackends connects to Redis and MySQL, or starts the embedded dev-mode
// backends when neither is configured.
func openBackends(ctx context.Context, cfg config.Config, log *zap.Logger, gm *groupMetrics) (*backends, error) {
	mopts := mysqlstore.Options{MaxOpenConns: cfg.MySQL.MaxOpenConns, QueryTimeout: cfg.MySQL.Timeout,
		BatchMaxRows: cfg.MySQL.GroupCommitRows, BatchMaxWait: cfg.MySQL.GroupCommitWait,
		OnGroupCommit: gm.groupCommit}
	if cfg.DevMode() {
		b, err := dev.Start(ctx, cfg.Dev.SQLitePath, mopts)
		if err != nil {
			return nil, err
		}
		note := "data is lost on exit unless QC_DEV_SQLITE_PATH is a file"
		if len(cfg.Auth.AdminTokens) == 0 {
			note += "; admin auth is off (no QC_ADMIN_TOKENS): /admin/* is open"
		}
		if len(cfg.Auth.APIKeys) == 0 {
			note += "; client auth is off (no QC_API_KEYS): /quota/* is open"
		}
		log.Warn("DEV MODE: no QC_REDIS_ADDR or QC_MYSQL_DSN set; running on embedded miniredis and a SQLite ledger",
			zap.String("redis", b.Redis.Addr()), zap.String("sqlite", cfg.Dev.SQLitePath),
			zap.String("note", note))
		return &backends{rdb: b.Client, ledger: b.Ledger, close: func() { _ = b.Close() }}, nil
	}
	// Redis unreachable at start is an outage like any other (issue 22
	// §11): the instance starts and answers as each policy says (fail-open
	// grants, 503s); the client connects once Redis answers.
	rdb, err := dialRedis(ctx, cfg.Redis)
	if err != nil {
		log.Warn("redis unreachable at start: serving as during any Redis outage (fail-open grants, 503s) and connecting when it answers",
			zap.Error(err))
		rdb = newRedisClient(cfg.Redis)
	}
	// MySQL unreachable at start likewise, unless it is to be migrated now.
	mopts.AllowUnreachable = !cfg.MigrateOnStart
	ms, err := mysqlstore.Open(ctx, cfg.MySQL.DSN, mopts)
	if err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("connect mysql: %w", err)
	}
	if err := ms.Ping(ctx); err != nil {
		log.Warn("mysql unreachable at start: serving as during any MySQL outage and connecting when it answers", zap.Error(err))
	}
	if cfg.MigrateOnStart {
		if err := ms.Migrate(ctx); err != nil {
			_ = rdb.Close()
			_ = ms.Close()
			return nil, fmt.Errorf("migrate: %w", err)
		}
		log.Info("migrations applied")
	}
	if h := redisTestHook.Load(); h != nil {
		rdb.AddHook(*h)
	}
	return &backends{rdb: rdb, ledger: ms, close: func() { _ = rdb.Close(); _ = ms.Close() }}, nil
}

// redisTestHook, set by tests only (export_test.go), is added to the Redis
// client of every server started after (not in dev mode).
var redisTestHook atomic.Pointer[redis.Hook]

func newLogger(c config.Log, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if c.Format == "console" {
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// Version is reported in the start-up log; cmd sets it from its build flags.
var Version = "dev"

// Serve runs `quota-center serve` with args (flags; QC_ variables fill the
// rest) until ctx is done, then shuts down: /readyz turns 503, in-flight
// requests drain within the grace period, the background loops stop, then
// Redis and MySQL are closed (instance.run). Logs go to logOut. onListen,
// when set, gets the bound address (tests listen on 127.0.0.1:0). It
// returns nil after a clean stop, and the error when the HTTP server fails
// or a background loop dies.
func Serve(ctx context.Context, args []string, logOut io.Writer, onListen func(addr string)) error {
	cfg, _, err := config.Load("serve", args)
	if cfg.DevMode() && !dev.Available && !errors.Is(err, flag.ErrHelp) {
		return errors.Join(dev.ErrNotBuilt, err) // first what matters most here
	}
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.Log, logOut)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", zap.String("version", Version), zap.Object("config", logObject{cfg.Redacted()}))
	logAuth(log, cfg)
	in, err := build(ctx, cfg, log)
	if err != nil {
		return err
	}
	log.Info("listening", zap.String("addr", in.ln.Addr().String()))
	if onListen != nil {
		onListen(in.ln.Addr().String())
	}
	return in.run(ctx)
}

// build opens the backends, builds the service, the HTTP API, the metrics
// and the background loops, and listens (synchronously, so that a taken
// port fails the start). On error, what was opened is closed again.
func build(ctx context.Context, cfg config.Config, log *zap.Logger) (_ *instance, err error) {
	in := &instance{log: log, grace: cfg.ShutdownGrace, drain: cfg.ShutdownDrain}
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gm := newGroupMetrics(reg)
	b, err := openBackends(ctx, cfg, log, gm)
	if err != nil {
		return nil, err
	}

	bm := breaker.NewMetrics(reg)
	bs := breaker.Settings{Failures: cfg.Breaker.Failures, OpenFor: cfg.Breaker.OpenFor}
	rs := hotStore(b.rdb, cfg.Redis, gm.pipeline, gm.batch).WithWait(redisWait(cfg.Redis, reg))
	// The pipelines stop before the client closes, the ledger's group
	// commits with the ledger (b.close: Redis, then MySQL).
	in.closers = append(in.closers, rs.Close, b.close)
	redisBreaker, mysqlBreaker := newRedisBreaker(cfg, rs, bs, bm, log), breaker.New("mysql", bs, bm, log)
	brk := quota.Breakers{Balances: redisBreaker, Ledger: mysqlBreaker}
	sched := &period.Scheduler{}
	// Policy changes are announced on Redis pub/sub so every instance drops
	// its cached copy at once (internal/policysync; the TTL stays the bound).
	var svc *quota.Service
	var active *activeSet
	var scrapeSt *scrapeStatus
	var scrapePl scrapePools
	bus := policysync.New(b.rdb, log.Named("policysync"),
		func(r string) { svc.ForgetPolicy(r) }, func(r string) { active.forget(r); scrapeSt.forget(r); scrapePl.c.forget(r) })
	// The resources used or changed within --active-window, shared by the
	// instances: the only ones the background loops visit and that have
	// per-resource series (internal/activity; issue 23 §1).
	tracker := activity.New(b.rdb, activity.Options{Window: cfg.Scale.ActiveWindow, Log: log.Named("activity")})
	// Every change the store makes to a resource is published on the
	// change log, so that the sweeper, the burn-rate sampler and the
	// scrape's balance reads skip the resources nothing changed since
	// their last visit (activity.Visits; each at least once a minute).
	rs.OnChange(tracker.Mutated)
	ann := announcingLedger{Store: b.ledger, bus: bus, forget: func(r string) { svc.ForgetPolicy(r) }, act: tracker}
	svc = quota.NewService(rs, b.ledger, ann, sched, quota.Options{
		PolicyCacheTTL: cfg.Quota.PolicyCacheTTL, FinishedRetention: cfg.Quota.FinishedRetention,
		LedgerTimeout: cfg.MySQL.Timeout,
		// The ledger given to the Service is this store itself (no wrapper
		// whose InsertSession this would bypass).
		InsertSessionBefore: b.ledger.InsertSessionBefore,
		GlobalSessionIDs:    cfg.Quota.GlobalSessionIDs,
		Audit:               b.ledger, Breakers: brk,
		// The pools are part of the balance: the Service reads them into
		// its policy+pools cache and writes them back in its seed step.
		Pools:   quota.PoolStores{Config: ann, Balances: rs}, // ann: a limit change (UpdatePolicyLocked) is announced
		Charges: quota.ChargeStores{Balances: rs, Ledger: b.ledger},
		OnCatchUp: func(r string, err error) {
			if err != nil {
				log.Warn("catch-up after a rebuild failed (reconciliation repairs it)", zap.String("resource", r), zap.Error(err))
			}
		},
	})
	// The pools' administration and controller call through the backend
	// breakers (admin.GuardPools); a change made through the
	// administration drops the Service's cached copy at once (ann does so
	// for the ledger's writes too, and tells the other instances).
	poolLedger, poolLive := admin.GuardPools(ann, rs, brk)
	poolAdmin := admin.NewPools(poolLedger, poolLive, svc, sched, nil)
	poolAdmin.SetLineCloseBound(cfg.Quota.LineCloseBound)
	// Its background marks stop before the ledger closes (closers run in order).
	in.closers = append([]func(){svc.Close}, in.closers...)
	active = newActiveSet(tracker, b.ledger, svc)
	// One status read per resource and scrape, shared by the balance
	// gauges and the forecasts.
	scrapeSt = newScrapeStatus(svc.Status)
	scrapeSt.visits = tracker.NewVisits(activity.DefaultFullVisit)
	scrapeSt.readMany = svc.Statuses // a scrape's changed balances in one batch
	active.status, active.prefetch = scrapeSt.Status, scrapeSt.Prefetch
	used := touching{Service: svc, act: tracker}
	// Series of the active resources only: made at 0 when one becomes
	// active (a PUT here, a sweep pass for the others), deleted once idle.
	metrics := httpapi.NewMetricsWith(reg, httpapi.MetricsOptions{ResourceHistograms: cfg.Scale.ResourceHistograms})
	httpapi.NewBalanceCollector(reg, active, 2*time.Second)
	// The pool gauges and the forecasts' burn samples are kept per
	// resource while it does not change, as the statuses are.
	scrapePl = newScrapePools(tracker.NewVisits(activity.DefaultFullVisit), poolAdmin)
	httpapi.NewPoolCollector(reg, active, scrapePl, 2*time.Second)
	ops := admin.New(admin.Deps{Quota: svc, Live: rs, Ledger: ann, Audit: b.ledger, Sched: sched, Active: active.ListPolicies,
		// Each minute at least: a forecast needs samples within admin.BurnWindow.
		SampleVisits: tracker.NewVisits(activity.MinuteVisit),
		// The sampler's reads, in one batch, are the scrape's too.
		SampleStatuses: scrapeSt.Refresh})
	// The samples kept must stay within admin.BurnWindow: read each minute.
	scrapeBn := newScrapeBurns(tracker.NewVisits(activity.MinuteVisit), rs.BurnSamples)
	scrapeBn.c.readMany = func(ctx context.Context, names []string) ([][]quota.BurnSample, []error) {
		return rs.BurnSamplesOf(ctx, names, time.Now().Add(-admin.BurnWindow))
	}
	forecasts := admin.NewForecastCollectorWith(reg, ops, 2*time.Second, scrapeSt.Status)
	forecasts.Samples = scrapeBn.BurnSamples
	forecasts.Prefetch = func(ctx context.Context, names []string) { // statuses and samples, at once
		var wg sync.WaitGroup
		wg.Go(func() { scrapeSt.Prefetch(ctx, names) })
		scrapeBn.c.prefetch(ctx, names)
		wg.Wait()
	}
	rec := reconcile.New(reconcile.Config{
		Interval: cfg.Reconcile.Interval, Grace: cfg.Reconcile.Grace, Settle: cfg.Reconcile.Settle,
		Breakers: brk, GlobalSessionIDs: cfg.Quota.GlobalSessionIDs,
		// Quiet resources skipped until a change; each still reconciled
		// at least as often as the session-by-session passes come.
		Visits: tracker.NewVisits(time.Duration(reconcile.DefaultFullEvery) * cfg.Reconcile.Interval),
	}, rs, b.ledger, active, sched, log.Named("reconcile"), reg)
	poolRunner := poolctl.New(activePools{poolLedger, active}, poolLive, poolLedger, sched, log, reg, 0, nil)
	// Controllers at rest skipped until a change; a pool settings change
	// is in MySQL only, so each minute at least.
	poolRunner.Visits = tracker.NewVisits(activity.MinuteVisit)
	api := httpapi.New(httpapi.Deps{
		Service: used, Logger: log.Named("http"), Metrics: metrics, Gatherer: reg, Lines: svc,
		Pools:        httpapi.PoolAdmin{Lines: poolAdmin, Grants: poolAdmin, Reclaims: poolAdmin},
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
		Auth:         httpAuth(cfg),
		Operator:     ops,
		Reconcile:    reconcileNow(rec, b.ledger),
		// /readyz does not ping the backends (an outage is answered with
		// 503s or fail-open grants, which needs the instance in its load
		// balancer); /healthz/backends does, for people and monitors. Its
		// body says up or down, the log has the details.
		Backends: func(ctx context.Context) []httpapi.BackendHealth {
			redisErr, mysqlErr := b.rdb.Ping(ctx).Err(), b.ledger.Ping(ctx)
			for name, err := range map[string]error{"redis": redisErr, "mysql": mysqlErr} {
				if err != nil {
					log.Warn("backend health: "+name+" is down", zap.Error(err))
				}
			}
			return []httpapi.BackendHealth{
				{Name: "redis", Up: redisErr == nil, Breaker: redisBreaker.State()},
				{Name: "mysql", Up: mysqlErr == nil, Breaker: mysqlBreaker.State()},
			}
		},
	})
	in.notReady = api.Drain
	sw := sweeper.New(sweeper.Config{
		Interval: cfg.Sweeper.Interval, Batch: cfg.Sweeper.Batch, Retention: cfg.Quota.FinishedRetention,
		OrphanGrace: cfg.Reconcile.Grace, Breakers: brk,
		OnPolicy: metrics.Known, // series at 0 for policies created on other instances
		Refused:  svc.CancelPending,
		Visits:   tracker.NewVisits(activity.DefaultFullVisit), // quiet resources skipped until a change or a lease's end
	}, active, rs, b.ledger, log.Named("sweeper"), reg)
	forecastLog := log.Named("forecast")
	in.loops = []loop{
		{"sweeper", sw.Run},
		{"compensate", svc.RunCompensation}, // refused applies' late reservations, given back
		{"forecast", func(ctx context.Context) error { return ops.Run(ctx, admin.DefaultSampleInterval, forecastLog) }},
		{"pools", poolRunner.Run},
		{"failover", failoverWatcher(cfg, rs, active, sched, rec, log, reg).Run},
		{"reconcile", rec.Run},
		{"policysync", policyBusLoop(bus, log, cfg.Quota.PolicyCacheTTL)},
		{"ledger-lifecycle", lifecycle.New(lifecycleConfig(cfg.Ledger), b.ledger, b.ledger, sched, log.Named("lifecycle"), reg).Run},
		{"activity", activityLoop(active, metrics, log.Named("activity"), sw.ForgetResource, rec.ForgetResource)},
	}

	if in.grpc, in.gln, err = buildGateway(ctx, cfg, used, log, reg); err != nil {
		return nil, err
	}
	if in.gln != nil {
		in.closers = append([]func(){func() { _ = in.gln.Close() }}, in.closers...) // a no-op once the server stopped
	}
	in.ln, err = net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.HTTP.Addr, err)
	}
	in.closers = append([]func(){func() { _ = in.ln.Close() }}, in.closers...) // a no-op once Serve closed it
	con := console.New(console.Deps{
		Ops: ops, Pools: poolAdmin, Audit: svc, Sessions: redisstore.NewConsoleSessions(b.rdb), SignIn: api.AdminSignIn,
		OpenAdmin: cfg.DevMode() && len(cfg.Auth.AdminTokens) == 0, Logger: log.Named("console"),
	})
	in.srv, err = httpserve.New(console.Mount(api.Handler(), con), httpserve.Options{
		Engine:            cfg.HTTP.Engine,
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		MaxBodyBytes:      cfg.HTTP.MaxBodyBytes,
		ErrorBody:         httpapi.ErrorBody,
		Logger:            log.Named("http.server"),
	})
	if err != nil {
		return nil, err
	}
	if cfg.HTTP.PprofAddr != "" {
		in.pln, err = net.Listen("tcp", cfg.HTTP.PprofAddr)
		if err != nil {
			return nil, fmt.Errorf("listen pprof %s: %w", cfg.HTTP.PprofAddr, err)
		}
		in.closers = append([]func(){func() { _ = in.pln.Close() }}, in.closers...)
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		in.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout}
		log.Info("pprof listening", zap.String("addr", in.pln.Addr().String()))
	}
	return in, nil
}

// reconcileNow is POST /admin/reconcile: a pass now over one resource ("" =
// all), its reports, how many were skipped (another pass held the lock),
// audited.
func reconcileNow(rec *reconcile.Reconciler, audit quota.AuditLog) func(ctx context.Context, resource string) (any, int, error) {
	return func(ctx context.Context, resource string) (any, int, error) {
		// Its own variables: this runs per request, concurrently.
		var reps []reconcile.Report
		var rerr error
		if resource == "" {
			reps, rerr = rec.All(ctx)
		} else {
			var rep reconcile.Report
			rep, rerr = rec.Resource(ctx, resource)
			reps = []reconcile.Report{rep}
		}
		if rerr != nil {
			return nil, 0, rerr
		}
		skipped := 0
		for _, r := range reps {
			if r.Skipped != "" {
				skipped++
			}
		}
		return reps, skipped, auditReconcile(ctx, audit, resource, reps)
	}
}

// httpAuth is the HTTP layer's view of the auth config. Production (both
// backends configured) without admin tokens disables /admin/*.
func httpAuth(cfg config.Config) httpapi.AuthConfig {
	a := httpapi.AuthConfig{Production: !cfg.DevMode()}
	for _, t := range cfg.Auth.AdminTokens {
		a.AdminTokens = append(a.AdminTokens, httpapi.AdminToken{Name: t.Name, Token: string(t.Token)})
	}
	for _, k := range cfg.Auth.APIKeys {
		a.APIKeys = append(a.APIKeys, httpapi.APIKey{
			Key: string(k.Key), ClientID: k.ClientID, Resources: k.Resources, AllResources: k.AllResources, Line: k.Line,
		})
	}
	return a
}

// logAuth says at start who may call what: token names and client ids,
// never a token or key.
func logAuth(log *zap.Logger, cfg config.Config) {
	switch {
	case len(cfg.Auth.AdminTokens) > 0:
		var names []string
		for _, t := range cfg.Auth.AdminTokens {
			names = append(names, t.Name)
		}
		log.Info("admin auth is on: /admin/* needs a bearer token", zap.Strings("admin_names", names))
	case cfg.DevMode():
		log.Warn("admin auth is off: /admin/* is open to anyone and changes are audited as anonymous (dev mode without QC_ADMIN_TOKENS)")
	default:
		log.Warn("admin endpoints are disabled: set QC_ADMIN_TOKENS")
	}
	if len(cfg.Auth.APIKeys) > 0 {
		var clients []string
		for _, k := range cfg.Auth.APIKeys {
			clients = append(clients, k.ClientID)
		}
		log.Info("client auth is on: /quota/* needs an X-API-Key", zap.Strings("client_ids", clients))
		return
	}
	if cfg.Auth.InsecureOpenQuota {
		log.Warn("client auth is off on purpose (QC_INSECURE_OPEN_QUOTA=true): /quota/* is open to anyone who can reach it and takes the clientId as given")
		return
	}
	log.Warn("client auth is off: /quota/* is open and takes the clientId as given (dev mode without QC_API_KEYS)")
}

// auditReconcile records an on-demand reconciliation (an admin action that
// changes Redis) in the audit log, with its reports as the "after".
func auditReconcile(ctx context.Context, log quota.AuditLog, resource string, reps []reconcile.Report) error {
	after, err := json.Marshal(reps)
	if err != nil {
		return err
	}
	if resource == "" {
		resource = "*"
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return log.RecordAudit(actx, quota.AuditEntry{
		At: time.Now().UTC().Truncate(time.Millisecond), Actor: quota.ActorFrom(ctx),
		Action: "reconcile", Resource: resource, After: after,
	})
}

// lifecycleConfig is the ledger lifecycle job's configuration.
func lifecycleConfig(l config.Ledger) lifecycle.Config {
	return lifecycle.Config{Interval: l.Interval, RollupAfter: l.RollupAfter, Retention: l.Retention,
		Batch: l.Batch, DeleteBatch: l.DeleteBatch, Pause: l.Pause, DryRun: l.DryRun,
		ClosedPeriodsOnly: l.ClosedPeriodsOnly}
}
