package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

var poolCloseScript = load("pool_close.lua")

// closeScanChunk is how many sessions CloseLine reads per round trip.
const closeScanChunk = 500

// CloseLine marks a line of resource closing in its layout
// (pool_close.lua: from then on apply.lua opens no new session on it,
// pools.ErrLineClosing) and then counts the sessions Redis holds open
// (USING, in the lease index) on that line: those an apply granted before
// the mark, whose ledger row may not be written yet. The mark is read
// again after the count: a layout rewritten meanwhile (Redis lost it) took
// the mark, and sessions may have opened unseen, so that is an error. The
// caller (a line's DELETE) deletes the line when open is 0 and the ledger
// agrees, else calls ReopenLine. It costs one read per open session of the
// resource (an operator's rare call). Errors: pools.ErrUnknownLine when
// Redis' layout has no such line (nothing marked), quota.ErrUnavailable.
func (s *Store) CloseLine(ctx context.Context, resource, line string) (open int64, err error) {
	v, err := s.run(ctx, poolCloseScript, []string{poolKey(resource)}, line, "1")
	if err != nil {
		return 0, wrap("close line", err)
	}
	if n, err := flag("pool_close.lua", v, int64(0), 1); err != nil || n == 0 {
		if err == nil {
			err = fmt.Errorf("close line %s of %s: not in Redis' layout: %w", line, resource, pools.ErrUnknownLine)
		}
		return 0, err
	}
	ids, err := s.rdb.ZRange(ctx, leasesKey(resource), 0, -1).Result()
	if err != nil {
		return 0, wrap("close line", err)
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), closeScanChunk)]
		ids = ids[len(chunk):]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.HMGet(ctx, sessionKey(resource, id), "status", "line")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, wrap("close line", err)
		}
		for _, c := range cmds {
			if f := c.Val(); len(f) == 2 && f[0] == string(quota.StatusUsing) && f[1] == line {
				open++
			}
		}
	}
	v, err = s.run(ctx, poolCloseScript, []string{poolKey(resource)}, line, "?")
	if err != nil {
		return 0, wrap("close line", err)
	}
	if n, err := flag("pool_close.lua", v, int64(0), 1); err != nil || n == 0 {
		if err == nil {
			err = fmt.Errorf("close line %s of %s: the layout was rewritten while its sessions were counted: %w", line, resource, quota.ErrUnavailable)
		}
		return 0, err
	}
	return open, nil
}

// ReopenLine takes a line's closing mark off (CloseLine): its DELETE was
// refused or failed, or the line is put again (the mark outlives a deleted
// line, pool_close.lua). Errors: quota.ErrUnavailable.
func (s *Store) ReopenLine(ctx context.Context, resource, line string) error {
	_, err := s.run(ctx, poolCloseScript, []string{poolKey(resource)}, line, "0")
	return wrap("reopen line", err)
}
