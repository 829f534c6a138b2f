package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

var (
	poolLayoutScript = load("pool_layout.lua")
	poolSeedScript   = load("pool_seed.lua")
)

func poolKey(r string) string   { return prefix(r) + "pl" }
func grantsKey(r string) string { return prefix(r) + "gr" }

// luaTrue and luaFalse are luaBool's answers boxed once, for argument
// lists ([]any) built per call.
var luaTrue, luaFalse any = "1", "0"

// luaFlag is luaBool as an argument of a script call, without boxing it.
func luaFlag(b bool) any {
	if b {
		return luaTrue
	}
	return luaFalse
}

func luaBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// SetPoolLayout writes a resource's layout (pool_layout.lua): the shared
// pool and each line's tier, dedicated part and borrowing limit; lines not
// in lay are removed. What the controller and operators moved (watermarks,
// lent, reclaimed, buffer) stays, a new line starting at its tier's
// watermark. An empty layout (no lines) removes the pools.
//
// When Redis has no layout of the resource (it lost it, or this is the
// first), moves says what to write with it: nil writes nothing and answers
// false (rebuild the moves from the policy store and call again); a
// non-nil one is written with the layout (pools.Moves.Fields) unless another
// caller wrote a layout first.
//
// cuts is the lent buffer the new layout cut back (a smaller buffer: the
// shared pool's first, line "", then the lines' in lay's order, as
// pools.Model.Relayout), for the caller to journal as RETURN pool events.
func (s *Store) SetPoolLayout(ctx context.Context, resource string, lay pools.Layout, moves *pools.Moves) (ok bool, cuts []pools.Cut, err error) {
	args := []any{itoa(lay.Shared), itoa(lay.Buffer), "?"}
	if len(lay.Lines) == 0 {
		args = []any{"-"}
	} else if moves != nil {
		f := moves.Fields(lay)
		args[2] = strconv.Itoa(len(f))
		for _, kv := range f {
			args = append(args, kv[0], itoa(kv[1].(int64)))
		}
	}
	for _, l := range lay.Lines {
		args = append(args, l.Name, string(l.Tier), itoa(l.Dedicated), itoa(l.BorrowCap), itoa(l.Tier.BaseWatermark()))
	}
	v, err := s.run(ctx, poolLayoutScript, []string{poolKey(resource)}, args...)
	if err != nil {
		return false, nil, wrap("pool layout", err)
	}
	r := readReply("pool_layout.lua", v, 1, 1+2*(1+len(lay.Lines)))
	ok = code(r, int64(0), 1) == 1
	for i := 1; i+1 < r.len(); i += 2 {
		cuts = append(cuts, pools.Cut{Line: r.str(i), Amount: r.int(i + 1)})
	}
	if r.len()%2 == 0 {
		r.fail("%d elements, want an odd count", r.len())
	}
	if r.err != nil {
		return false, nil, wrap("pool layout", r.err)
	}
	return ok, cuts, nil
}

// SeedPools writes a period's pool counters if they are not there yet
// (pool_seed.lua) and reports whether it did. The period's balance must
// exist (Seed first). t is what the ledger holds (mysqlstore.PoolTotals);
// an open session of it that Redis finished or cancelled since counts
// what Redis settled it to, so a finish landing between the ledger's read
// and this write keeps its refund.
func (s *Store) SeedPools(ctx context.Context, resource string, per quota.Period, t pools.Totals) (bool, error) {
	keys := make([]string, 1, 1+len(t.Open))
	keys[0] = balanceKey(resource, per.ID())
	args := make([]any, 1, 1+5*(len(t.Settled)+len(t.Open)))
	args[0] = strconv.Itoa(len(t.Settled))
	for line, d := range t.Settled {
		args = append(args, line, itoa(d.Dedicated), itoa(d.Shared), itoa(d.Buffer), itoa(d.Grant))
	}
	for _, o := range t.Open {
		keys = append(keys, sessionKey(resource, o.SessionID))
		d := o.Drawn
		args = append(args, o.Line, itoa(d.Dedicated), itoa(d.Shared), itoa(d.Buffer), itoa(d.Grant))
	}
	v, err := s.run(ctx, poolSeedScript, keys, args...)
	if err != nil {
		return false, wrap("pool seed", err)
	}
	n, err := flag("pool_seed.lua", v, int64(-1), 0, 1)
	if err != nil {
		return false, wrap("pool seed", err)
	}
	if n == -1 {
		return false, fmt.Errorf("pool seed %s: the period's balance is not seeded", resource)
	}
	return n == 1, nil
}

// PutGrant writes a temporary grant (its used counter is kept). The caller
// validates it (pools.Model.AddGrant's rules) and keeps it in the policy store.
func (s *Store) PutGrant(ctx context.Context, resource string, g pools.Grant) error {
	defer s.changed(nil, grantsKey(resource))
	return wrap("grant", s.rdb.HSet(ctx, grantsKey(resource), g.ID, grantValue(g)).Err())
}

func grantValue(g pools.Grant) string {
	return itoa(g.Amount) + "|" + itoa(g.EffectiveMs) + "|" + itoa(g.ExpiresMs) + "|" + g.Line
}

var poolGrantsScript = load("pool_grants.lua")

// RestoreGrants writes a resource's grants (each with Used: what finished
// sessions hold of it) unless Redis has them (pool_grants.lua: a hash it
// wrote before is marked) and reports whether it wrote them. open are the
// sessions the ledger showed open (mysqlstore.GrantsHeld): each adds its
// whole draw of each grant, or, when Redis has finished or cancelled it
// since, what Redis settled it to. gs may be empty: the hash is then
// marked as checked.
func (s *Store) RestoreGrants(ctx context.Context, resource string, gs []pools.Grant, open []pools.OpenDraw) (bool, error) {
	keys := make([]string, 1, 1+len(open))
	keys[0] = grantsKey(resource)
	args := make([]any, 1, 1+3*len(gs)+len(open))
	args[0] = strconv.Itoa(len(gs))
	for _, g := range gs {
		args = append(args, g.ID, grantValue(g), itoa(g.Used))
	}
	for _, o := range open {
		keys = append(keys, sessionKey(resource, o.SessionID))
		args = append(args, pools.FormatGrants(o.Drawn.Grants))
	}
	v, err := s.run(ctx, poolGrantsScript, keys, args...)
	if err != nil {
		return false, wrap("restore grants", err)
	}
	n, err := flag("pool_grants.lua", v, int64(0), 1)
	return n == 1, wrap("restore grants", err)
}

// VoidGrant stops a grant from being drawn; what sessions hold of it stays
// counted until they finish.
func (s *Store) VoidGrant(ctx context.Context, resource, id string) error {
	return wrap("grant", s.rdb.HDel(ctx, grantsKey(resource), id).Err())
}

// PoolModel reads a resource's pools into a pools.Model: the layout and live
// moves (qc:{r}:pl), the period's counters and the grants. lay gives the
// lines' tiers and parts as the policy store has them; Redis's values win
// where both exist. Sessions are not read.
func (s *Store) PoolModel(ctx context.Context, resource string, per quota.Period, lay pools.Layout) (*pools.Model, error) {
	pipe := s.rdb.Pipeline()
	pl := pipe.HGetAll(ctx, poolKey(resource))
	bal := pipe.HGetAll(ctx, balanceKey(resource, per.ID()))
	gr := pipe.HGetAll(ctx, grantsKey(resource))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap("pool state", err)
	}
	p, b, g := pl.Val(), bal.Val(), gr.Val()
	get := func(h map[string]string, k string) int64 {
		v, _ := strconv.ParseInt(h[k], 10, 64)
		return v
	}
	m := pools.NewModel(lay, true)
	m.Period = per.ID()
	m.SharedBuffer = get(p, "sbuf")
	m.Epoch = p["ep"]
	m.SharedUsed = get(b, "su")
	if len(lay.Lines) == 0 {
		m.BaseUsed = get(b, "charged") + get(b, "reserved") - get(b, "gsum")
	}
	for name, l := range m.Lines {
		if w, ok := p["w:"+name]; ok {
			l.Watermark, _ = strconv.ParseInt(w, 10, 64)
		}
		l.Lent, l.Reclaimed, l.Buffer, l.Consumed = get(p, "l:"+name), get(p, "r:"+name), get(p, "b:"+name), get(p, "n:"+name)
		l.RefuseAcc = get(p, "k:"+name)
		l.Mode = pools.Mode(p["m:"+name])
		l.ClosingUntil = closingUntil(p["cl:"+name])
		l.UsedDedicated, l.UsedShared, l.UsedBuffer, l.UsedGrant = get(b, "ud:"+name), get(b, "us:"+name), get(b, "ub:"+name), get(b, "ug:"+name)
	}
	for id, v := range g {
		if strings.HasPrefix(id, "u:") {
			continue
		}
		parts := strings.SplitN(v, "|", 4)
		if len(parts) != 4 {
			continue
		}
		gt := &pools.Grant{ID: id, Line: parts[3], Used: get(g, "u:"+id)}
		gt.Amount, _ = strconv.ParseInt(parts[0], 10, 64)
		gt.EffectiveMs, _ = strconv.ParseInt(parts[1], 10, 64)
		gt.ExpiresMs, _ = strconv.ParseInt(parts[2], 10, 64)
		m.Grants = append(m.Grants, gt)
	}
	return m, nil
}

var poolMoveScript = load("pool_move.lua")

// MovePools applies m in the resource's current period per and returns
// what it moved and the free buffer after. Errors: pools.ErrUnknownLine.
func (s *Store) MovePools(ctx context.Context, resource string, per quota.Period, m pools.Move) (moved, free int64, err error) {
	args := []any{m.Op, m.Line}
	switch m.Op {
	case "reclaim", "giveback":
		args = append(args, m.To, itoa(m.Amount))
	case "mode":
		args = append(args, string(m.Mode))
	default:
		args = append(args, itoa(m.Amount))
	}
	v, err := s.run(ctx, poolMoveScript, []string{poolKey(resource), balanceKey(resource, per.ID())}, args...)
	if err != nil {
		return 0, 0, wrap("pool move", err)
	}
	r := readReply("pool_move.lua", v, 2, 2)
	moved, free = r.int(0), r.int(1)
	if r.err != nil {
		return 0, 0, wrap("pool move", r.err)
	}
	if moved < 0 {
		return 0, free, fmt.Errorf("pool move %s %q: %w", m.Op, m.Line, pools.ErrUnknownLine)
	}
	return moved, free, nil
}

// SpareMoves lists the spare buffer's moves that apply.lua noted in a
// resource's layout (fields jq:<ref> of qc:{r}:pl) and no caller has
// journalled and forgotten yet, in pools.ParseSpareNote's form.
func (s *Store) SpareMoves(ctx context.Context, resource string) ([]string, error) {
	all, err := s.rdb.HGetAll(ctx, poolKey(resource)).Result()
	if err != nil {
		return nil, wrap("spare moves", err)
	}
	var out []string
	for f, v := range all {
		if ref, ok := strings.CutPrefix(f, pools.SpareNotePrefix); ok {
			out = append(out, ref+"|"+v)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ForgetSpareMoves removes the notes of the moves refs (journalled now).
func (s *Store) ForgetSpareMoves(ctx context.Context, resource string, refs []string) error {
	if len(refs) == 0 {
		return nil
	}
	f := make([]string, len(refs))
	for i, r := range refs {
		f[i] = pools.SpareNotePrefix + r
	}
	return wrap("forget spare moves", s.rdb.HDel(ctx, poolKey(resource), f...).Err())
}
