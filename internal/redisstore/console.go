package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ConsoleSessions keeps the web console's sign-in sessions in Redis
// (qc:console:s:<id>, a string with a TTL), so that every instance behind a
// load balancer knows every session and a sign-out ends it everywhere.
type ConsoleSessions struct{ rdb redis.UniversalClient }

// NewConsoleSessions wraps a go-redis client.
func NewConsoleSessions(rdb redis.UniversalClient) *ConsoleSessions {
	return &ConsoleSessions{rdb: rdb}
}

func consoleKey(id string) string { return "qc:console:s:" + id }

// Put stores value under id for ttl. Errors: one wrapping
// quota.ErrUnavailable.
func (c *ConsoleSessions) Put(ctx context.Context, id string, value []byte, ttl time.Duration) error {
	return wrap("console session", c.rdb.Set(ctx, consoleKey(id), value, ttl).Err())
}

// Get reads the value under id; found is false when there is none (never
// stored, expired or deleted). Errors: one wrapping quota.ErrUnavailable.
func (c *ConsoleSessions) Get(ctx context.Context, id string) (value []byte, found bool, err error) {
	v, err := c.rdb.Get(ctx, consoleKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap("console session", err)
	}
	return v, true, nil
}

// Delete removes id. Errors: one wrapping quota.ErrUnavailable.
func (c *ConsoleSessions) Delete(ctx context.Context, id string) error {
	return wrap("console session", c.rdb.Del(ctx, consoleKey(id)).Err())
}
