-- apply.lua: check and reserve in one step; idempotent by session id. One
-- script for every resource: a plain one (no business lines, no temporary
-- grants) and one with pools alike; a plain resource is one with no lines
-- whose grant is drawn whole from its limit (the base). The session
-- protocol is session.lib's, the pools' rules pools.lib's; the rules and
-- their reference model are in internal/pools (Model.Apply), and a
-- randomized test holds the two together.
-- KEYS[1] qc:{r}:limit          string, the resource's limit
-- KEYS[2] qc:{r}:b:<periodMs>   hash of the period: charged, reserved, ep (epoch,
--         seed.lua) and, once its pool counters are seeded (ps = "1"), su shared
--         held, ud:L us:L ub:L ug:L held from dedicated / shared / buffer / grants,
--         gsum held from grants
-- KEYS[3] qc:{r}:s:<sessionId>  hash, the session
-- KEYS[4] qc:{r}:leases         zset sessionId -> lease expiry (ms)
-- KEYS[5] qc:{r}:s:<scopedId>   the session under its scoped id (read only with ARGV[10])
-- KEYS[6] qc:{r}:pl  layout and live moves (read only with pools): shared, sbuf
--   (buffer released to shared) and per line L: t:L tier (CORE|GROWTH|EXPLORE),
--   d:L dedicated part, c:L borrow cap, w:L watermark (bp), l:L lent by reclaim,
--   r:L reclaimed to it, b:L buffer lent to it, n:L consumed (all periods),
--   k:L the watermark's refusal counter (basis points, pools.LineState.RefuseAcc),
--   cl:L the line's closing mark (pool_close.lua): the deadline (ms, Redis TIME) until
--   which a DELETE of it refuses new sessions, or "d" once it deleted the line; a
--   deadline passed is ignored (its DELETE died; pools.LineState.Closing),
--   buffer the layout's buffer. An apply of critical work or a continuation
--   that would be refused first moves the spare buffer (lent to no one, or
--   lent to another line that does not hold it) into sbuf (pools.lib
--   spareToShared; pools.Model.SpareToShared)
-- KEYS[7] qc:{r}:gr  grants (read only with ARGV[11] "2"):
--   <id> = "amount|effectiveMs|expiresMs|line", u:<id> = held (all periods)
-- ARGV[1] amount   ARGV[2] minAmount (0 = all-or-nothing)   ARGV[3] clientId
-- ARGV[4] period start ms   ARGV[5] period end ms (0 = never)
-- ARGV[6] lease ms   ARGV[7] sessionId   ARGV[8] "1" = first period (no lower bound)
-- ARGV[9] the attempt: a token of this apply request ("" = none; go-redis
--         resends of one request carry the same), kept on the session it
--         grants ('att') with the balance's epoch ('bep'); see session.lib's
--         replay for why a replay by another attempt takes it off.
-- ARGV[10] scopedId ("" = none): session ids are scoped to (resource,
--         client) (internal/quota scope.go); scoped_session.lib says whether
--         the session is the bare or the scoped one; for the scoped one every
--         code is returned plus 10.
-- ARGV[11] pools: absent or "0" none (a plain resource: KEYS[6] and KEYS[7] are not
--         read and may be left out, as ARGV[12-14] may, the pool counters
--         need not be seeded, the session keeps no split), "1" lines or
--         grants but no grant that is not expired (the
--         caller's cached view: KEYS[7] is not read, none is drawn), "2"
--         lines or grants
-- ARGV[12] businessLine ("" or absent = none)   ARGV[13] "1" = critical
-- ARGV[14] "1" = continuation (never refused by a watermark)
-- Returns 18 elements (session.lib's answer; the fast path's grant 4, below): {code, granted, remaining,
--   leaseMs, startMs, periodMs, nowMs, limit, charged, reserved, reason,
--   tight, base, dedicated, shared, buffer, grant, grantList}, and a 19th
--   only when the apply moved the spare buffer (codes 1 and 3):
--   "ref|line|unlent|from=n;…" (pools.ParseSpareNote), also kept as field
--   jq:<ref> of KEYS[6] until the caller has journalled it. With pools
--   (ARGV[11] "1" or "2") every grant, refusal and replay answers 21: the
--   19th '' when nothing moved, then held and room (grantroom.lib: what the
--   period holds of grants and what the grants in force may still give,
--   after this apply), for remainingQuota (quota.Balance.Remaining)
--   code 1 granted, 2 replayed (the first answer), 3 refused (nothing
--   changed but the watermark's counter k:L and the spare buffer moved into
--   sbuf; reason LINE_EXHAUSTED, WATERMARK, POOL_EXHAUSTED (its borrowing
--   limit would cover it, the shared pool does not) or EXHAUSTED (the limit
--   less what sessions hold of it is short: without lines, or a line whose
--   pools would cover it)),
--   4 wrong period, 5 need balance (the balance, the limit or, with pools,
--   the pool counters are not seeded), 6 conflict (the session id exists
--   with other arguments), 8 unknown line, 9 the line is being deleted (cl:L
--   holds: "d", or its deadline not passed; a replay still answers) (4, 5, 6, 8, 9: nothing changed).
--   remaining: what the line (or the resource) could still be granted after
--   this apply; on a line, what its next apply of the same kind could be
--   granted (pools.lib nextRoom: recomputed after the grant or from the
--   state a refusal leaves; for non-critical work 0 when the watermark
--   would refuse the next one; for critical work or a continuation with
--   the spare buffer moved, 0 when the watermark would refuse GROWTH or
--   EXPLORE critical work even so); '' = the period's, limit − charged − reserved (a plain
--   refusal, a replay of a session restored from the ledger). limit,
--   charged, reserved: the period's after the apply, as Redis holds them.
--   tight: 1 when buffer is lent to the line now (elasticity saw its quota
--   getting tight, or an operator released it): degrade non-critical work.
--   The split (codes 1 and 2) sums to granted: base is what a resource
--   without lines drew from its limit (all of a plain resource's grant).
-- The fast path: a new session on a plain resource (ARGV[11] absent), with
-- a scoped id and an attempt (as quota-center's POST /quota/apply sends
-- it: nearly every apply). Redis's CPU per apply is the ceiling of one hot
-- resource (docs/performance.md, issue 23 §3), so this path runs before any
-- of the libraries' functions is made (each a closure per call) and builds
-- no table but the reply: the same decision as the general path below
-- without lines or grants (all of the amount, or the minimum, from limit −
-- charged − reserved; pools.Model.Apply on a layout without lines).
-- Granted, it answers 4 elements {1, granted, remaining, nowMs} (the rest
-- the caller knows: start = now, lease = now + ARGV[6], the period's start,
-- the whole grant drawn from the base); refused, the general 18. Anything
-- else (the period not open, the balance not seeded or without its epoch,
-- reserved past 2^53) falls through to the general path before any write:
-- it decides again from scratch.
if not ARGV[11] and ARGV[10] ~= '' and ARGV[9] ~= '' and redis.call('EXISTS', KEYS[3], KEYS[5]) == 0 then
  -- Decimal strings become numbers by arithmetic (x + 0, a - b): one strtod
  -- each, where tonumber(x) makes two (Lua 5.1's lua_isnumber, then
  -- lua_tonumber). Every string converted here is a decimal one (TIME, the
  -- caller's arguments, the counters these scripts write); a malformed one
  -- is a script error either way.
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local limitStr = redis.call('GET', KEYS[1])
  local b = redis.call('HMGET', KEYS[2], 'charged', 'reserved', 'ep')
  local charged, held = b[1], b[2]
  if (ARGV[8] == '1' or now >= ARGV[4] + 0) and (ARGV[5] == '0' or now < ARGV[5] + 0)
      and limitStr and charged and held and b[3] then
    local amount, cur = ARGV[1] + 0, held + 0
    local base = limitStr - charged - cur
    local n, granted = amount, ARGV[1]
    if base < amount then
      local min = ARGV[2] + 0
      if not (min > 0 and base >= min) then
        return {3, 0, '', 0, 0, 0, now, limitStr, charged, held, 'EXHAUSTED', 0, 0, 0, 0, 0, 0, ''}
      end
      n, granted = base, string.format('%d', base)
    end
    if cur + n < 9007199254740992 then
      if n ~= 0 then
        redis.call('HINCRBY', KEYS[2], 'reserved', granted)
      end
      local ls = string.format('%d', now + ARGV[6])
      local rem, st = string.format('%d', base - n), string.format('%d', now)
      local sk, amt, minAmt, client, per, att, ep = KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[9], b[3]
      -- include fast_session.lib
      redis.call('ZADD', KEYS[4], ls, ARGV[7])
      return {1, n, base - n, now}
    end
  end
end

-- include session.lib
-- include pools.lib
-- include grantroom.lib

local line = ARGV[12] or ''
local pooled = (ARGV[11] or '0') ~= '0'
local sk, sid, s = openSession()
if s and s[1] then
  local r = replay(sk, s, pooled)
  if pooled and r[8] ~= '' then
    -- The grants' figure now (grantroom.lib), as a grant or refusal answers it.
    local h, g = grantRoom(KEYS[2], KEYS[7], now)
    if h then r[19], r[20], r[21] = '', h, g end
  end
  return r
end
if not inPeriod() then
  return answer(4)
end

-- The period's counters in one read: charged, reserved, the epoch and,
-- with pools, ps (seeded), gsum and the line's fields.
local f = {'charged', 'reserved', 'ep'}
if pooled then
  f[4], f[5] = 'ps', 'gsum'
  if line ~= '' then
    f[6], f[7], f[8], f[9], f[10] = 'ud:' .. line, 'us:' .. line, 'ub:' .. line, 'ug:' .. line, 'su'
  end
end
local limitStr = redis.call('GET', KEYS[1])
local b = redis.call('HMGET', KEYS[2], unpack(f))
if not limitStr or not b[1] or not b[2] or (pooled and b[4] ~= '1') then
  return answer(5)
end
local limit = tonumber(limitStr)
local amount, min = tonumber(ARGV[1]), tonumber(ARGV[2])
local function want(avail)
  if avail >= amount then return amount end
  if min > 0 and avail >= min then return avail end
  return nil
end

local gs = {}
local gheld, groomAll = num(b[5]), 0
if ARGV[11] == '2' then gs, groomAll = activeGrants(line) end
local groom = 0
for _, g in ipairs(gs) do groom = groom + g.room end
local tight = 0
-- noted: r with the spare buffer's move as its 19th element when this
-- apply made one (pools.lib spareNote; the caller journals it).
-- With pools it answers the grants' figure as 20th and 21st elements
-- (held, room: grantroom.lib; the 19th is then '' without a move): what
-- the period holds of grants (gsum) and what the grants in force may still
-- give, every line's, after this apply (gheld, groomAll below).
local function noted(r)
  if spareNote then r[19] = spareNote end
  if pooled then
    r[19], r[20], r[21] = spareNote or '', fmt(gheld), fmt(groomAll)
  end
  return r
end
local function refuse(reason, lineRemaining)
  -- A plain refusal answers the period's remaining (''); one with pools
  -- what the line could still be granted (lineRemaining), else 0.
  local rem = ''
  if pooled then rem = lineRemaining or 0 end
  return noted(answer(3, 0, rem, 0, 0, 0, {limitStr, b[1], b[2]}, reason, tight))
end

local d = {0, 0, 0, 0, 0} -- base, dedicated, shared, buffer, grant
local n, remaining
if line == '' then
  if pooled and redis.call('HEXISTS', KEYS[6], 'shared') == 1 then return answer(8) end
  -- The limit less what sessions hold of it (not of grants).
  local base = limit - num(b[1]) - num(b[2])
  if pooled then base = math.max(0, limit - (num(b[1]) + num(b[2]) - num(b[5]))) end
  n = want(base + groom)
  if not n then return refuse('EXHAUSTED') end
  d[1] = math.min(n, base)
  remaining = base + groom - n
else
  local p = redis.call('HMGET', KEYS[6], 't:' .. line, 'd:' .. line, 'c:' .. line, 'w:' .. line,
    'l:' .. line, 'r:' .. line, 'b:' .. line, 'shared', 'sbuf', 'k:' .. line, 'cl:' .. line)
  if not p[1] then return answer(8) end
  if closing(p[11]) then return answer(9) end -- the line is being deleted (pool_close.lua)
  local own = num(p[2]) - num(p[5]) + num(p[6])
  local cap, buf = num(p[3]), num(p[7])
  if buf > 0 then tight = 1 end
  local ud, us, ub, su = num(b[6]), num(b[7]), num(b[8]), num(b[10])
  local critical, cont = ARGV[13] == '1', ARGV[14] == '1'
  local exempt = cont or (p[1] == 'CORE' and critical)
  local sbuf = num(p[9])
  local availD = math.max(0, own - ud)
  local availB = math.max(0, buf - ub)
  -- What the pools may give is capped by the limit less what sessions hold
  -- of it (not of grants): pools that add up to more than the limit (lent
  -- buffer a layout left standing) never grant past it (pools.Model.Apply).
  local room = math.max(0, limit - (num(b[1]) + num(b[2]) - num(b[5])))
  -- Critical work or a continuation that would be refused (by the
  -- watermark, its counter only read, or by the draw) first puts the spare
  -- buffer into the shared pool (pools.Model.SpareToShared), but only if
  -- it then fits by capacity (pools.Model.fitsAfterSpare): an apply refused
  -- even after the move leaves the buffer where it was.
  if critical or cont then
    local aS = borrowRoom(math.max(0, num(p[8]) + sbuf - su), cap, us, exempt)
    local no = false
    if not exempt then
      local share = refuseShare(ud + us + ub, own + buf + us + aS, num(p[4]), critical)
      no = share >= 10000 or (share > 0 and num(p[10]) + share >= 10000)
    end
    if no or not want(math.min(availD + aS + availB, room) + groom) then
      local aS2 = borrowRoom(math.max(0, num(p[8]) + spareToShared(line, true) - su), cap, us, exempt)
      if want(math.min(availD + aS2 + availB, room) + groom) then
        sbuf = spareToShared(line, false)
      end
    end
  end
  local raw = num(p[8]) + sbuf - su
  local free = math.max(0, raw)
  local availS = borrowRoom(free, cap, us, exempt)
  local fromPools = math.min(availD + availS + availB, room)
  local avail = fromPools + groom
  local acc, wmNo = num(p[10]), false
  if not exempt then
    wmNo, acc = refusedByWatermark(line, ud + us + ub, own + buf + us + availS, num(p[4]), acc, critical)
  end
  -- A refusal's lineRemaining: what the line's next apply of this kind
  -- could be granted, from the state this refusal leaves (nextRoom: for
  -- non-critical work 0 when the watermark would refuse it; for critical
  -- work or a continuation with the spare buffer moved, 0 when the
  -- watermark would refuse GROWTH or EXPLORE critical work even so;
  -- pools.Model.LineRoom).
  local function left()
    return nextRoom(line, own, buf, ud, us, ub, raw, cap, room, groom, num(p[4]), acc, critical, cont, exempt)
  end
  if wmNo then
    saveRefuseAcc(line, acc, num(p[10]))
    return refuse('WATERMARK', left())
  end
  n = want(avail)
  if not n then
    -- Refused for lack of room: the watermark's counter stays as it was
    -- (a refusal changes nothing), and lineRemaining is read from it.
    acc = num(p[10])
    local left = left()
    if want(availD + availS + availB + groom) then return refuse('EXHAUSTED', left) end
    if want(availD + math.max(0, cap - us) + availB + groom) then return refuse('POOL_EXHAUSTED', left) end
    return refuse('LINE_EXHAUSTED', left)
  end
  local rest = math.min(n, fromPools)
  d[2] = math.min(rest, availD); rest = rest - d[2]
  d[3] = math.min(rest, availS); rest = rest - d[3]
  d[4] = math.min(rest, availB)
  -- lineRemaining: recomputed after this grant (half of what the shared
  -- pool has free changes with it; pools.Model.LineRoom), not avail - n.
  remaining = nextRoom(line, own, buf, ud + d[2], us + d[3], ub + d[4], raw - d[3], cap,
    room - d[2] - d[3] - d[4], groom - (n - math.min(n, fromPools)), num(p[4]), acc, critical, cont, exempt)
  saveRefuseAcc(line, acc, num(p[10]))
  redis.call('HINCRBY', KEYS[6], 'n:' .. line, fmt(n))
end
local rest = n - d[1] - d[2] - d[3] - d[4]
local gl = {}
for _, g in ipairs(gs) do
  if rest == 0 then break end
  local x = math.min(rest, g.room)
  redis.call('HINCRBY', KEYS[7], 'u:' .. g.id, fmt(x))
  gl[#gl + 1] = g.id .. '=' .. fmt(x)
  d[5] = d[5] + x
  rest = rest - x
end
gheld, groomAll = gheld + d[5], groomAll - d[5]

-- The period's counters in one write: the values read above plus what this
-- grant holds (exact below 2^53; past it, HINCRBY's 64-bit arithmetic).
-- reserved: its value after this grant as Redis holds it, nil when HINCRBY
-- wrote it (then read back below).
local w = {}
local function bump(field, cur, delta)
  if delta == 0 then return cur or '0' end
  local c = tonumber(cur or '0')
  if c + delta < 9007199254740992 then
    w[#w + 1] = field
    w[#w + 1] = fmt(c + delta)
    return fmt(c + delta)
  end
  redis.call('HINCRBY', KEYS[2], field, fmt(delta))
  return nil
end
local reserved = bump('reserved', b[2], n)
if pooled then
  bump('gsum', b[5], d[5])
  if line ~= '' then
    bump('ud:' .. line, b[6], d[2])
    bump('us:' .. line, b[7], d[3])
    bump('su', b[10], d[3])
    bump('ub:' .. line, b[8], d[4])
    bump('ug:' .. line, b[9], d[5])
  end
end
if #w > 0 then redis.call('HSET', KEYS[2], unpack(w)) end

-- The session keeps its split with pools (finish.lua and cancel.lua give
-- it back to the pools it came from); without a line 'db' holds the base.
local glist = table.concat(gl, ';')
local split = {}
if pooled then
  split = {'line', line, 'dd', fmt(d[2]), 'ds', fmt(d[3]), 'db', fmt(d[1] + d[4]), 'dg', fmt(d[5]), 'gl', glist}
end
local lease = writeSession(sk, sid, fmt(n), fmt(remaining), split, b[3])
if not reserved then
  reserved = redis.call('HGET', KEYS[2], 'reserved')
end
return noted(answer(1, n, remaining, lease, now, tonumber(ARGV[4]), {limitStr, b[1], reserved}, '', tight, d, glist))
