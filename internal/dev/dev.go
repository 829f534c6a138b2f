//go:build !nodev

package dev

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
)

// Available reports whether this binary has dev mode: false in a build
// with -tags nodev (the container image's), which leaves miniredis and the
// SQLite driver out.
const Available = true

// Backends are the running embedded backends. Close stops them.
type Backends struct {
	Redis  *miniredis.Miniredis
	Client redis.UniversalClient
	Ledger *mysqlstore.Store
}

// Start starts miniredis on a free loopback port and opens (and migrates)
// the SQLite ledger at sqlitePath (":memory:" for none on disk).
func Start(ctx context.Context, sqlitePath string, opts mysqlstore.Options) (*Backends, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start miniredis: %w", err)
	}
	st, err := mysqlstore.OpenSQLite(ctx, sqlitePath, opts)
	if err != nil {
		mr.Close()
		return nil, fmt.Errorf("open sqlite ledger: %w", err)
	}
	if err := st.Migrate(ctx); err != nil {
		_ = st.Close()
		mr.Close()
		return nil, fmt.Errorf("migrate sqlite ledger: %w", err)
	}
	return &Backends{Redis: mr, Client: redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{mr.Addr()}}), Ledger: st}, nil
}

// Close stops the backends: the Redis client, miniredis, then the ledger.
func (b *Backends) Close() error {
	_ = b.Client.Close()
	b.Redis.Close()
	return b.Ledger.Close()
}
