package app

import (
	"context"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
)

// PruneStore runs ledger prune's pass over st (e.g. a SQLite store, which
// the command itself does not open) with the lifecycle settings of cfg.
func PruneStore(ctx context.Context, st *mysqlstore.Store, cfg config.Ledger, dryRun bool, resource, output string, stdout io.Writer) error {
	lc := lifecycleConfig(cfg)
	lc.DryRun = dryRun
	return pruneWith(ctx, st, lc, pruneOptions{dryRun: dryRun, resource: resource, output: output}, stdout)
}

// SetRedisHook adds h to the Redis client of the servers started until
// the returned func is called (not in dev mode).
func SetRedisHook(h redis.Hook) (restore func()) {
	redisTestHook.Store(&h)
	return func() { redisTestHook.Store(nil) }
}
