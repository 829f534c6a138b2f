package redisstore

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Masters tells, for each resource, which master holds its keys now: an
// identity that changes when that master is replaced (a replica promoted
// after a failover, on a cluster or behind Sentinel) or restarted (its
// run_id). On a cluster, each master is "<node id>@<addr>/<run_id>"; on one
// server every resource gets "<addr>/<run_id>". A resource whose master
// could not be asked this time is absent from the map.
func (s *Store) Masters(ctx context.Context, resources []string) (map[string]string, error) {
	out := make(map[string]string, len(resources))
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		slots, err := clusterMasters(ctx, c)
		if err != nil {
			return nil, err
		}
		runIDs := map[string]string{} // master addr → run_id
		var mu sync.Mutex
		_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			id, err := runID(ctx, m)
			if err == nil {
				mu.Lock()
				runIDs[m.Options().Addr] = id
				mu.Unlock()
			}
			return nil // a master that does not answer: its resources are absent
		})
		for _, r := range resources {
			slot, err := s.slotOf(ctx, c, r)
			if err != nil {
				return nil, err
			}
			for _, sl := range slots {
				if sl.start <= slot && slot <= sl.end {
					if id, ok := runIDs[sl.addr]; ok {
						out[r] = sl.id + "@" + sl.addr + "/" + id
					}
				}
			}
		}
	case *redis.Client:
		id, err := runID(ctx, c)
		if err != nil {
			return nil, err
		}
		for _, r := range resources {
			out[r] = c.Options().Addr + "/" + id
		}
	default:
		return nil, fmt.Errorf("redis masters: client %T is neither one server nor a cluster", s.rdb)
	}
	return out, nil
}

// slotMaster is the master serving one range of a cluster's hash slots,
// and the replicas of its shard that are online.
type slotMaster struct {
	start, end int64
	id, addr   string // node id, host:port
	replicas   []string
}

// clusterMasters reads CLUSTER SHARDS (Redis 7.0 or later; it replaces
// CLUSTER SLOTS, deprecated since 7.0): for each slot range, the shard's
// online master. A shard whose master is failing (between a failure and
// its replica's promotion) has no entry. Errors: one wrapping
// quota.ErrUnavailable.
func clusterMasters(ctx context.Context, c *redis.ClusterClient) ([]slotMaster, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return nil, wrap("cluster shards", err)
	}
	addr := func(n redis.Node) string {
		host := n.Endpoint
		if host == "" || host == "?" {
			host = n.IP
		}
		return net.JoinHostPort(host, strconv.FormatInt(n.Port, 10))
	}
	var out []slotMaster
	for _, sh := range shards {
		var m slotMaster
		for _, n := range sh.Nodes {
			switch {
			case n.Health != "online":
			case n.Role == "master":
				m.id, m.addr = n.ID, addr(n)
			default:
				m.replicas = append(m.replicas, addr(n))
			}
		}
		if m.addr == "" {
			continue
		}
		for _, r := range sh.Slots {
			m.start, m.end = r.Start, r.End
			out = append(out, m)
		}
	}
	return out, nil
}

// slotOf is the cluster slot of a resource's keys (CLUSTER KEYSLOT, asked
// once per resource: a slot never changes).
func (s *Store) slotOf(ctx context.Context, c *redis.ClusterClient, resource string) (int64, error) {
	if v, ok := s.slots.Load(resource); ok {
		return v.(int64), nil
	}
	slot, err := c.ClusterKeySlot(ctx, limitKey(resource)).Result()
	if err != nil {
		return 0, wrap("cluster keyslot", err)
	}
	s.slots.Store(resource, slot)
	return slot, nil
}

// runID reads INFO server's run_id: a new one after every start.
func runID(ctx context.Context, c *redis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", wrap("info", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redis info: no run_id in %q", info)
}

// DropBalance deletes one period's balance of a resource, so that the next
// apply rebuilds it from the ledger (quota.Service seeds it under the
// period's seed lock, as after Redis lost it). Sessions are left as they
// are. It is the repair after a failover, when the new master may lack the
// last changes the old one answered; the caller holds the period's seed
// lock, and f names it (drop.lua checks it in the same step as the delete;
// the zero Fence drops unfenced). Errors: quota.ErrLockLost when the lock
// no longer holds f.Token (nothing dropped: the lock expired while the
// caller was cut off, and another seeder may have written a fresh balance
// since), backend errors.
func (s *Store) DropBalance(ctx context.Context, resource string, per quota.Period, f quota.Fence) error {
	v, err := s.run(ctx, dropScript, []string{balanceKey(resource, per.ID()), lockKey(resource, f.Name)}, f.Token)
	if err != nil {
		return wrap("drop balance", err)
	}
	c, err := flag("drop.lua", v, dropNoBalance, dropDropped, dropFenced)
	if err != nil {
		return wrap("drop balance", err)
	}
	if c == dropFenced {
		return fmt.Errorf("drop balance %s: lock %s: %w", resource, f.Name, quota.ErrLockLost)
	}
	return nil
}
