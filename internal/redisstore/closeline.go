package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

var poolCloseScript = load("pool_close.lua")

// closeScanChunk is how many sessions CloseLine reads per round trip.
const closeScanChunk = 500

// CloseLine marks a line of resource closing in its layout until bound
// has passed (pool_close.lua: until then apply.lua opens no new session on
// it, pools.ErrLineClosing; a mark past its deadline is ignored, so a
// DELETE that dies after the mark leaves the line usable again after
// bound) and then counts the sessions Redis holds open (USING, in the
// lease index) on that line: those an apply granted before the mark, whose
// ledger row may not be written yet. mark is the mark's deadline (ms,
// Redis TIME), the token of the caller's later ClosingHeld and EndClosing.
// The mark is read again after the count: a layout rewritten meanwhile
// (Redis lost it) took the mark, and sessions may have opened unseen, as
// they may once the deadline passed, so either is an error. The caller (a
// line's DELETE) deletes the line when open is 0 and the ledger agrees,
// checks with ClosingHeld that its mark held until its layout without the
// line was written, else calls EndClosing. It costs one read per open
// session of the resource (an operator's rare call). Errors:
// pools.ErrUnknownLine when Redis' layout has no such line (nothing
// marked), quota.ErrUnavailable.
func (s *Store) CloseLine(ctx context.Context, resource, line string, bound time.Duration) (open, mark int64, err error) {
	v, err := s.run(ctx, poolCloseScript, []string{poolKey(resource)}, line, "1", bound.Milliseconds())
	if err != nil {
		return 0, 0, wrap("close line", err)
	}
	mark, ok := v.(int64)
	if !ok {
		return 0, 0, fmt.Errorf("close line %s of %s: pool_close.lua answered %v: %w", line, resource, v, quota.ErrUnavailable)
	}
	if mark == 0 {
		return 0, 0, fmt.Errorf("close line %s of %s: not in Redis' layout: %w", line, resource, pools.ErrUnknownLine)
	}
	ids, err := s.rdb.ZRange(ctx, leasesKey(resource), 0, -1).Result()
	if err != nil {
		return 0, 0, wrap("close line", err)
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
			return 0, 0, wrap("close line", err)
		}
		for _, c := range cmds {
			if f := c.Val(); len(f) == 2 && f[0] == string(quota.StatusUsing) && f[1] == line {
				open++
			}
		}
	}
	held, err := s.ClosingHeld(ctx, resource, line, mark, false)
	if err != nil {
		return 0, 0, err
	}
	if !held {
		return 0, 0, fmt.Errorf("close line %s of %s: the mark was lost or its bound passed while the sessions were counted: %w",
			line, resource, quota.ErrUnavailable)
	}
	return open, mark, nil
}

// ClosingHeld reports whether the line's closing mark is still mark (the
// deadline CloseLine set) and its deadline has not passed by Redis' clock:
// then no session opened on the line since CloseLine. With drop, and when
// it holds, the resource's layout is deleted in the same step (the last
// line's DELETE: the layout without any line, as an empty
// SetPoolLayout writes it). Errors: quota.ErrUnavailable.
func (s *Store) ClosingHeld(ctx context.Context, resource, line string, mark int64, drop bool) (bool, error) {
	op := "?"
	if drop {
		op = "-"
	}
	v, err := s.run(ctx, poolCloseScript, []string{poolKey(resource)}, line, op, mark)
	if err != nil {
		return false, wrap("closing mark", err)
	}
	n, err := flag("pool_close.lua", v, int64(0), 1)
	return n == 1, err
}

// EndClosing takes a line's closing mark off (deleted false: its DELETE
// was refused or failed, or the line is put again) or makes it the deleted
// line's tombstone, which never expires (deleted true: its DELETE
// committed; pool_close.lua). mark is the CloseLine's deadline, so that a
// late call never ends another DELETE's mark; 0 ends whatever mark is set
// (a PUT of the line). Errors: quota.ErrUnavailable.
func (s *Store) EndClosing(ctx context.Context, resource, line string, mark int64, deleted bool) error {
	tok, how := "", "0"
	if mark != 0 {
		tok = strconv.FormatInt(mark, 10)
	}
	if deleted {
		how = "d"
	}
	_, err := s.run(ctx, poolCloseScript, []string{poolKey(resource)}, line, "e", tok, how)
	return wrap("end closing", err)
}

// closingUntil decodes a closing mark as pool_close.lua writes it: a
// deadline in ms, the tombstone "d" (pools.Deleted), 0 for none; a value
// that is not a number (the "1" of older versions is one: passed long
// ago) counts as passed, as apply.lua reads it.
func closingUntil(v string) int64 {
	if v == "d" {
		return pools.Deleted
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}
