//go:build nodev

package dev

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
)

// Available reports whether this binary has dev mode: false in this build
// (-tags nodev), which leaves miniredis and the SQLite driver out of the
// production binary.
const Available = false

// Backends has the shape of dev mode's backends; this build never makes
// one.
type Backends struct {
	Redis  noRedis
	Client redis.UniversalClient
	Ledger *mysqlstore.Store
}

type noRedis struct{}

func (noRedis) Addr() string { return "" }

// Start fails with ErrNotBuilt: this binary has no dev mode.
func Start(context.Context, string, mysqlstore.Options) (*Backends, error) { return nil, ErrNotBuilt }

// Close does nothing.
func (*Backends) Close() error { return nil }
