-- pool_apply.lua: an apply on a resource with business lines or temporary
-- grants: which pools it draws from, or why it is refused, in one step;
-- idempotent by session id. The rules and their reference model are in
-- internal/pools (Model.Apply); a randomized test holds the two together.
-- KEYS[1] qc:{r}:limit   KEYS[2] qc:{r}:b:<periodMs>   KEYS[3] qc:{r}:s:<sessionId>
-- KEYS[4] qc:{r}:leases  KEYS[5] qc:{r}:pl (layout and live moves)   KEYS[6] qc:{r}:gr (grants)
-- ARGV[1] amount  ARGV[2] minAmount  ARGV[3] clientId  ARGV[4] period start ms
-- ARGV[5] period end ms (0 = never)  ARGV[6] lease ms  ARGV[7] sessionId
-- ARGV[8] "1" = first period   ARGV[9] businessLine ("" = none)
-- ARGV[10] "1" = critical   ARGV[11] "1" = continuation
-- ARGV[12] "1" = the resource has no temporary grant that is not expired
--          (the caller's cached view): KEYS[6] is not read, none is drawn
-- ARGV[13] the attempt: a token of this apply request ("" or absent = none),
--          kept on the session it grants ('att') with the balance's epoch
--          ('bep'), and taken off by a replay of another attempt, as in
--          apply.lua: the compensation of an apply answered 503 whose script
--          ran late (cancel.lua ARGV[4], issue 11 §3.1) gives back only a
--          session that is still that attempt's alone
-- KEYS[7] qc:{r}:s:<scopedId>  ARGV[14] scopedId ("" or absent = none): which
--   of the bare and the scoped session is this one (scoped_session.lib, as
--   apply.lua; internal/quota scope.go); for the scoped one every code is
--   returned plus 10.
-- qc:{r}:pl: shared, sbuf (buffer released to shared) and per line L:
--   t:L tier (CORE|GROWTH|EXPLORE), d:L dedicated part, c:L borrow cap, w:L watermark (bp),
--   l:L lent by reclaim, r:L reclaimed to it, b:L buffer lent to it, n:L consumed (all periods),
--   k:L the watermark's refusal counter (basis points, pools.LineState.RefuseAcc)
-- qc:{r}:b:<p> adds: ps = "1" once the pool counters are seeded, su shared held,
--   ud:L us:L ub:L ug:L held from dedicated / shared / buffer / grants, gsum held from grants
-- qc:{r}:gr: <id> = "amount|effectiveMs|expiresMs|line", u:<id> = held (all periods)
-- Returns {code, granted, remaining, leaseMs, startMs, periodMs, nowMs, reason,
--          dedicated, shared, buffer, grant, grantList, tight}
--   and, for codes 1 and 2, the period's limit, charged and reserved after
--   the apply as the decimal strings Redis holds (the caller computes the
--   period's remaining, limit − charged − reserved, exactly past 2^53).
--   codes as apply.lua (1 granted, 2 replayed, 3 refused, 4 wrong period,
--   5 need balance, 6 conflict) and 8 unknown line. reason: LINE_EXHAUSTED,
--   WATERMARK, POOL_EXHAUSTED (its borrowing limit would cover it, the shared
--   pool does not), EXHAUSTED. remaining: what the line (or the
--   resource) could still be granted after this apply. grantList "id=n;id=n".
--   tight: 1 when buffer is lent to the line now (elasticity saw its quota
--   getting tight, or an operator released it): the caller should degrade
--   non-critical work.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fmt(n) return string.format('%d', n) end
local function num(v) return tonumber(v or '0') or 0 end

-- include scoped_session.lib
-- The session in one read: what a replay compares (1-5), its attempt (6)
-- and what it answers (7-16).
local sk, sid, form, s = scopedSession(KEYS[3], KEYS[7], ARGV[7], ARGV[14] or '', ARGV[3],
  {'amount', 'min', 'client', 'status', 'line', 'att',
    'granted', 'remaining', 'lease', 'start', 'period', 'dd', 'ds', 'db', 'dg', 'gl'}, 3, 4)
if s[4] == 'CANCELLED' then
  redis.call('DEL', sk)
  s[1] = false
end
if s[1] then
  if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or s[3] ~= ARGV[3] or (s[5] or '') ~= ARGV[9] then
    return {6 + form}
  end
  if s[6] and s[6] ~= (ARGV[13] or '') then
    redis.call('HDEL', sk, 'att')
  end
  local r = {unpack(s, 7, 16)}
  -- The period's figures now (of the caller's period, KEYS[2]).
  local pb = redis.call('HMGET', KEYS[2], 'charged', 'reserved')
  return {2 + form, num(r[1]), num(r[2]), num(r[3]), num(r[4]), num(r[5]), now, '',
    num(r[6]), num(r[7]), num(r[8]), num(r[9]), r[10] or '', 0,
    redis.call('GET', KEYS[1]) or '0', pb[1] or '0', pb[2] or '0'}
end
local pstart, pend = tonumber(ARGV[4]), tonumber(ARGV[5])
if (now < pstart and ARGV[8] ~= '1') or (pend > 0 and now >= pend) then
  return {4 + form, 0, 0, 0, 0, 0, now}
end
local line = ARGV[9]
local limit = redis.call('GET', KEYS[1])
-- The period's counters in one read: ps (seeded), then the line's (or, on a
-- resource without lines, the limit's) fields; charged at bc and the epoch
-- ('ep', seed.lua) at be: what a grant answers and keeps.
local b, bc, be
if line == '' then
  b = redis.call('HMGET', KEYS[2], 'ps', 'charged', 'reserved', 'gsum', 'ep')
  bc, be = 2, 5
else
  b = redis.call('HMGET', KEYS[2], 'ps', 'ud:' .. line, 'us:' .. line, 'ub:' .. line, 'su', 'reserved', 'gsum',
    'ug:' .. line, 'charged', 'ep')
  bc, be = 9, 10
end
if not limit or b[1] ~= '1' then
  return {5 + form, 0, 0, 0, 0, 0, now}
end
limit = tonumber(limit)
local amount, min = tonumber(ARGV[1]), tonumber(ARGV[2])

-- Active grants this line may draw, the one that expires first first.
local function grants()
  local out = {}
  if ARGV[12] == '1' then return out end
  local all = redis.call('HGETALL', KEYS[6])
  local used = {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'u:' then used[string.sub(all[i], 3)] = tonumber(all[i + 1]) end
  end
  for i = 1, #all, 2 do
    local id = all[i]
    if string.sub(id, 1, 2) ~= 'u:' then
      local a, e, x, l = string.match(all[i + 1], '^(%d+)|(%d+)|(%d+)|(.*)$')
      a, e, x = tonumber(a), tonumber(e), tonumber(x)
      local u = used[id] or 0
      if e <= now and now < x and (l == '' or l == line) and u < a then
        out[#out + 1] = {id = id, room = a - u, exp = x}
      end
    end
  end
  table.sort(out, function(p, q)
    if p.exp ~= q.exp then return p.exp < q.exp end
    return p.id < q.id
  end)
  return out
end
local function want(avail)
  if avail >= amount then return amount end
  if min > 0 and avail >= min then return avail end
  return nil
end
-- The watermark's refused share in basis points: the same float
-- arithmetic as pools.RefuseShare (non-critical applies from the watermark,
-- critical ones from halfway between it and 100 %).
local function refuseShare(used, reach, wm, critical)
  if reach <= 0 then return 0 end
  local x = used / reach * 100
  local w = wm / 100
  local span = (100 - w) / 2
  local lo = w
  if critical then lo = w + span end
  if x < lo then return 0 end
  local frac = (x - lo) / span
  if frac >= 1 then return 10000 end
  return math.floor(frac * 10000)
end
-- Refused by the watermark: the line's own error-diffusion counter k:L
-- (pools.refusedByWatermark) adds the share and refuses at each pass of
-- 10000; nothing the client sends picks which applies are refused.
local function refusedByWatermark(used, reach, wm, acc, critical)
  local share = refuseShare(used, reach, wm, critical)
  if share == 0 then return false end
  if share >= 10000 then return true end
  acc = acc + share
  local out = false
  if acc >= 10000 then
    acc = acc - 10000
    out = true
  end
  redis.call('HSET', KEYS[5], 'k:' .. line, fmt(acc))
  return out
end
-- What a line may draw from the shared pool (pools.Model.BorrowRoom):
-- everything free for an exempt apply, otherwise the larger of what its
-- borrowing limit leaves and half of what is free.
local function borrowRoom(free, cap, us, exempt)
  if exempt then return free end
  return math.min(free, math.max(cap - us, math.floor(free / 2)))
end
local tight = 0
local function refuse(reason)
  return {3 + form, 0, 0, 0, 0, 0, now, reason, 0, 0, 0, 0, '', tight}
end

local gs = grants()
local groom = 0
for _, g in ipairs(gs) do groom = groom + g.room end
local d = {0, 0, 0, 0} -- dedicated, shared, buffer (or base, for a resource without lines), grant
local n, remaining
if line == '' then
  if redis.call('HEXISTS', KEYS[5], 'shared') == 1 then return {8 + form} end
  local base = math.max(0, limit - (num(b[2]) + num(b[3]) - num(b[4])))
  n = want(base + groom)
  if not n then return refuse('EXHAUSTED') end
  d[3] = math.min(n, base)
  remaining = base + groom - n
else
  local p = redis.call('HMGET', KEYS[5], 't:' .. line, 'd:' .. line, 'c:' .. line, 'w:' .. line,
    'l:' .. line, 'r:' .. line, 'b:' .. line, 'shared', 'sbuf', 'k:' .. line)
  if not p[1] then return {8 + form} end
  local own = num(p[2]) - num(p[5]) + num(p[6])
  local cap, buf = num(p[3]), num(p[7])
  if buf > 0 then tight = 1 end
  local ud, us, ub, su = num(b[2]), num(b[3]), num(b[4]), num(b[5])
  local critical = ARGV[10] == '1'
  local exempt = ARGV[11] == '1' or (p[1] == 'CORE' and critical)
  local free = math.max(0, num(p[8]) + num(p[9]) - su)
  local availS = borrowRoom(free, cap, us, exempt)
  if not exempt and refusedByWatermark(ud + us + ub, own + buf + us + availS, num(p[4]), num(p[10]), critical) then
    return refuse('WATERMARK')
  end
  local availD = math.max(0, own - ud)
  local availB = math.max(0, buf - ub)
  n = want(availD + availS + availB + groom)
  if not n then
    if want(availD + math.max(0, cap - us) + availB + groom) then return refuse('POOL_EXHAUSTED') end
    return refuse('LINE_EXHAUSTED')
  end
  local rest = n
  d[1] = math.min(rest, availD); rest = rest - d[1]
  d[2] = math.min(rest, availS); rest = rest - d[2]
  d[3] = math.min(rest, availB)
  remaining = availD + availS + availB + groom - n
  redis.call('HINCRBY', KEYS[5], 'n:' .. line, fmt(n))
end
local rest = n - d[1] - d[2] - d[3]
local gl = {}
for _, g in ipairs(gs) do
  if rest == 0 then break end
  local x = math.min(rest, g.room)
  redis.call('HINCRBY', KEYS[6], 'u:' .. g.id, fmt(x))
  gl[#gl + 1] = g.id .. '=' .. fmt(x)
  d[4] = d[4] + x
  rest = rest - x
end
-- The period's counters in one write: the values read above plus what this
-- grant holds (exact below 2^53; past it, HINCRBY's 64-bit arithmetic).
-- reserved: its value after this grant as Redis holds it, nil when HINCRBY
-- wrote it (then read back below).
local w = {}
local reserved
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
if line == '' then
  reserved = bump('reserved', b[3], n)
  bump('gsum', b[4], d[4])
else
  bump('ud:' .. line, b[2], d[1])
  bump('us:' .. line, b[3], d[2])
  bump('su', b[5], d[2])
  bump('ub:' .. line, b[4], d[3])
  reserved = bump('reserved', b[6], n)
  bump('gsum', b[7], d[4])
  bump('ug:' .. line, b[8], d[4])
end
if #w > 0 then redis.call('HSET', KEYS[2], unpack(w)) end
local glist = table.concat(gl, ';')
local lease = now + tonumber(ARGV[6])
-- The session in one write, with the attempt and the epoch when there are.
local sw = {'amount', ARGV[1], 'min', ARGV[2], 'client', ARGV[3], 'granted', fmt(n), 'remaining', fmt(remaining),
  'lease', fmt(lease), 'start', fmt(now), 'period', ARGV[4], 'status', 'USING',
  'line', line, 'dd', fmt(d[1]), 'ds', fmt(d[2]), 'db', fmt(d[3]), 'dg', fmt(d[4]), 'gl', glist}
if ARGV[13] and ARGV[13] ~= '' then
  sw[#sw + 1] = 'att'
  sw[#sw + 1] = ARGV[13]
end
if b[be] then
  sw[#sw + 1] = 'bep'
  sw[#sw + 1] = b[be]
end
redis.call('HSET', sk, unpack(sw))
redis.call('ZADD', KEYS[4], lease, sid)
-- The period's charged and reserved after this grant: charged as read,
-- reserved as written (HSET above; past 2^53 HINCRBY's, read back).
if not reserved then
  reserved = redis.call('HGET', KEYS[2], 'reserved')
end
return {1 + form, n, remaining, lease, now, pstart, now, '', d[1], d[2], d[3], d[4], glist, tight,
  fmt(limit), b[bc] or '0', reserved}
