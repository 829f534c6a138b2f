package app

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/breaker"
	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/failover"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/reconcile"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// newRedisClient builds the go-redis client of c: one server (standalone),
// a Redis Cluster (Addr lists seed nodes; the client learns the rest and
// follows slot moves and failovers) or the master the Sentinels at Addr name
// MasterName (the client follows its failovers).
func newRedisClient(c config.Redis) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: c.Addrs(), Password: c.Password, DB: c.DB,
		MasterName: c.MasterName, SentinelPassword: c.SentinelPassword,
		// One seed address may still be a cluster.
		IsClusterMode: c.Mode == config.RedisCluster,
		DialTimeout:   c.Timeout * 2, ReadTimeout: c.Timeout, WriteTimeout: c.Timeout,
		PoolSize: c.PoolSize, MinIdleConns: 4,
		// go-redis retries a command after a network error or timeout (and,
		// on a cluster, follows MOVED/ASK redirects); every script is
		// idempotent by session id, so a retry never charges twice.
		MaxRetries: 2,
	})
}

// dialRedis is newRedisClient's client for c, once it answered a PING
// within 5s. Errors: "connect redis ADDR (MODE): cause", the client closed.
func dialRedis(ctx context.Context, c config.Redis) (redis.UniversalClient, error) {
	rdb := newRedisClient(c)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("connect redis %s (%s): %w", c.Addr, c.Mode, err)
	}
	return rdb, nil
}

// hotStore is the Store of quota-center's hot path on rdb: apply, heartbeat
// and finish auto-pipelined (c.PipelineMaxCalls calls a pipeline, 0 = one
// round trip each; redisstore.DefaultPipelining.InFlight pipelines at once,
// 2 with WAIT for replicas, 4 on a Redis Cluster; two sends at least
// c.PipelineInterval apart),
// each pipeline given the client's own read timeout (c.Timeout, or
// go-redis's 3s default for the dev-mode client). onPipeline (nil: none) is
// told each pipeline's calls, onBatch (nil: none) each batch of applies
// (redisstore.Pipelining.OnBatch). No WAIT (see Store.WithWait). Close the
// Store before the client.
func hotStore(rdb redis.UniversalClient, c config.Redis, onPipeline func(calls int), onBatch func(applies, undecided int)) *redisstore.Store {
	timeout := c.Timeout
	if cl, ok := rdb.(*redis.Client); ok && cl.Options().ReadTimeout > 0 {
		timeout = cl.Options().ReadTimeout
	}
	s := redisstore.NewPipelined(rdb, redisstore.Pipelining{
		MaxCalls: c.PipelineMaxCalls, InFlight: hotInFlight(rdb, c), Interval: c.PipelineInterval,
		Timeout: timeout, OnPipeline: onPipeline, BatchApplies: c.BatchApplies, OnBatch: onBatch,
	})
	s.HashSessions = c.SessionRecord == config.SessionRecordHash
	return s
}

// hotInFlight is how many hot-path pipelines are out at once on rdb:
// redisstore.DefaultPipelining.InFlight (1) on one server or a
// Sentinel-managed master, 2 with WAIT for replicas, 4 on a Redis Cluster.
func hotInFlight(rdb redis.UniversalClient, c config.Redis) int {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		// A cluster keeps 4: a pipeline stuck on one master (a slot moving,
		// a master failing over) must leave slots for the others' calls
		// (TestMovingOneSlotLeavesResourcesOnOtherMastersServed).
		return 4
	}
	if c.WaitReplicas > 0 {
		// A pipeline followed by WAIT is out for a replica's
		// acknowledgement too (up to QC_REDIS_WAIT_TIMEOUT): a second one
		// lets the next calls run meanwhile.
		return 2
	}
	return redisstore.DefaultPipelining.InFlight
}

// newRedisBreaker is the circuit breaker in front of the balance store: on a
// Redis Cluster one per master (breaker.PerNode, keyed by the master serving
// each resource's slot, so that one master's trouble or one slot's move does
// not fail the resources of the others: issue 22, item 6), else one for the
// server or the Sentinel-managed master.
func newRedisBreaker(cfg config.Config, rs *redisstore.Store, s breaker.Settings, m *breaker.Metrics, log *zap.Logger) interface {
	quota.Breaker
	State() string
} {
	if cfg.Redis.Mode == config.RedisCluster && !cfg.DevMode() {
		return breaker.NewPerNode("redis", s, m, log, rs)
	}
	return breaker.New("redis", s, m, log)
}

// OpenRedis is quota-center serve's Redis path for c, without the rest of
// the service (for cmd/qc-baseline's ledger mode, the floor of the
// benchmark): the client serve builds, pinged, and on it the auto-pipelined
// hot-path Store serve uses, with no WAIT and no metrics. Close the Store,
// then the client. Errors: as dialRedis.
func OpenRedis(ctx context.Context, c config.Redis) (redis.UniversalClient, *redisstore.Store, error) {
	rdb, err := dialRedis(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return rdb, hotStore(rdb, c, nil, nil), nil
}

// redisWait is the store's WAIT setting (QC_REDIS_WAIT_REPLICAS, _TIMEOUT),
// with quota_redis_unreplicated_calls_total registered on reg: calls
// answered although fewer replicas than asked acknowledged them in time.
func redisWait(c config.Redis, reg prometheus.Registerer) redisstore.Wait {
	short := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quota_redis_unreplicated_calls_total",
		Help: "State-changing Redis script calls answered although fewer than QC_REDIS_WAIT_REPLICAS replicas acknowledged them within QC_REDIS_WAIT_TIMEOUT (0 when waiting is off).",
	})
	reg.MustRegister(short)
	return redisstore.Wait{Replicas: c.WaitReplicas, Timeout: c.WaitTimeout, OnShort: func(n int) { short.Add(float64(n)) }}
}

// idle is a background loop with nothing to do: it returns when ctx ends.
type idle struct{}

func (idle) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// failoverWatcher notices a replaced or restarted Redis master every second
// and rebuilds its active resources from the ledger (internal/failover), then
// reconciles them after --reconcile-settle. Dev mode has no master to lose:
// it gets a loop that does nothing.
func failoverWatcher(cfg config.Config, rs *redisstore.Store, active *activeSet, sched quota.Scheduler,
	rec *reconcile.Reconciler, log *zap.Logger, reg prometheus.Registerer) interface{ Run(context.Context) error } {
	if cfg.DevMode() {
		return idle{}
	}
	repairs, watched := failover.NewMetrics(reg)
	return &failover.Watcher{
		Topology: rs, Balances: rs, Active: active, Policies: active, Scheduler: sched,
		Reconcile: func(ctx context.Context, resource string) error {
			return reconcileUntilSettled(ctx, rec, resource, cfg.Reconcile.Settle)
		},
		ReconcileAfter: cfg.Reconcile.Settle,
		Log:            log.Named("failover"),
		Repairs:        repairs,
		Watched:        watched,
		OnMasterChange: active.tr.Reset, // the loops that skip unchanged resources visit all again
	}
}

// reconcileUntilSettled reconciles a rebuilt resource until a pass finds no
// drift or corrects it (a drift is corrected only when no request changed
// the resource between two reads, so under traffic it takes more than one
// pass), every settle, at most 20 passes; the periodic passes go on after.
func reconcileUntilSettled(ctx context.Context, rec *reconcile.Reconciler, resource string, settle time.Duration) error {
	var err error
	for range 20 {
		var rep reconcile.Report
		rep, err = rec.Resource(ctx, resource)
		if err == nil && rep.Skipped == "" && (rep.BalanceAdjusted || rep.DriftCharged == 0 && rep.DriftReserved == 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settle):
		}
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("reconcile %s: drift still there after 20 passes", resource)
}
