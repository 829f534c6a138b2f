package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NodeOf is the address (host:port) of the master that serves resource's
// keys now, from the cluster client's slot map (no round trip once the map
// is known; it follows slot moves and failovers as the client learns them).
// On one server or behind Sentinel it is "" (one master serves every
// resource). internal/breaker keys its per-master breakers with it.
// Errors: the cluster client's, when it knows no slot map yet (every seed
// node unreachable).
func (s *Store) NodeOf(ctx context.Context, resource string) (string, error) {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return "", nil
	}
	m, err := c.MasterForKey(ctx, limitKey(resource))
	if err != nil {
		return "", wrap("master for key", err)
	}
	return m.Options().Addr, nil
}

// MasterNodes lists the addresses of the cluster's masters as the client's
// slot map has them (nil on one server or behind Sentinel). Errors: the
// cluster client's, when it knows no slot map.
func (s *Store) MasterNodes(ctx context.Context) ([]string, error) {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	var mu sync.Mutex
	var out []string
	err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		out = append(out, m.Options().Addr)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, wrap("masters", err)
	}
	return out, nil
}
