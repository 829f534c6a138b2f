-- finish.lua: settle a session; idempotent by session id.
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases   KEYS[3] qc:{r}:limit
-- KEYS[4] qc:{r}:b:<periodMs>    the balance of the period the caller expects
--         the session in (a guess: the session hash holds its period; checked here)
-- KEYS[5] qc:{r}:gr   the resource's temporary grants (pools; see apply.lua)
-- ARGV[1] actual   ARGV[2] retention ms   ARGV[3] sessionId
-- ARGV[4] clientId of the caller ("" = any); another client's session is "not found"
-- ARGV[5] periodMs of KEYS[4]
-- Returns {code, granted, actual, refunded, overage, 0, periodMs, startMs, endMs, wasLeaked, clientId,
--          limit, charged, reserved, held, room} for codes 1 and 2, {code} or {8, periodMs} otherwise
--   (held, room: what the grants add to remainingQuota, grantroom.lib; '' for
--   a plain resource):
--   code 0 not found, 1 finished now, 2 replay of the first finish, 6 conflict
--   (a repeat with another actual), 7 the usage would overflow the period's
--   counter (nothing written), 8 the session is in another period than
--   ARGV[5] (nothing written: call again with that period's balance key).
--   limit, charged and reserved are the
--   decimal strings of the session's period balance after the finish ("" when
--   that balance no longer exists); the caller computes remaining from them,
--   exactly, past 2^53 too. USING: the grant leaves `reserved`, the actual
--   enters `charged`. LEAKED: the grant was charged by the sweep, so only
--   actual - granted is added (a true-up). The refund lands in the session's
--   own period, never in a later one.
-- An error reply QCNEGATIVE (nothing written) when the settlement would
-- leave the balance's charged or reserved below zero.
-- include grantroom.lib
-- The session's state in one read: what every finish needs, and 'dd' (set
-- on a session applied with pools). What only a replay answers, and the
-- rest of what a pools session drew, are read when needed: each field
-- HMGET asks for is a walk of the session's listpack, and a field the
-- session does not have (a plain or USING one's) is a walk of all of it.
-- (Decimal strings become numbers by arithmetic, x + 0: one strtod each,
-- where tonumber(x) makes two; each string converted so is a decimal one:
-- TIME, the caller's arguments, the fields these scripts write.)
-- A packed session (scripts/session_record.lib) has granted, start and
-- period only in its record "amount|min|granted|remaining|start|period".
local s = redis.call('HMGET', KEYS[1], 'status', 'granted', 'period', 'client', 'start', 'bep', 'dd', 'r')
if s[8] then
  local g, st, per = string.match(s[8], '^[^|]*|[^|]*|([^|]*)|[^|]*|([^|]*)|([^|]*)$')
  s[2], s[3], s[5] = s[2] or g, s[3] or per, s[5] or st
end
if not s[1] or s[1] == 'CANCELLED' or (ARGV[4] ~= '' and s[4] ~= ARGV[4]) then
  return {0}
end
if s[1] == 'FINISHED' then
  local f = redis.call('HMGET', KEYS[1], 'actual', 'refunded', 'overage', 'end', 'leaked',
    'flimit', 'fcharged', 'freserved', 'fheld', 'froom')
  if f[1] ~= ARGV[1] then
    return {6}
  end
  return {2, tonumber(s[2]), tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), 0,
    tonumber(s[3]), tonumber(s[5]), tonumber(f[4]), tonumber(f[5]), s[4], f[6] or '', f[7] or '', f[8] or '',
    f[9] or '', f[10] or ''}
end
if s[3] ~= ARGV[5] then
  return {8, s[3]}
end

-- Pools (internal/pools, Model.Finish): a session applied by apply.lua
-- ('dd' set) gives its unused part back to the pools it came from, in the
-- reverse of the draw order (grants, buffer, shared, dedicated); an overage
-- is charged to its line's dedicated part (to the limit, for a resource
-- without lines). The session keeps what it stays charged to (dd, ds, db,
-- dg, gl), for the ledger. Counters of a period not yet seeded (ps) are not
-- touched: the seed rebuilds them from the ledger.
local function settlePools(sk, bkey, gkey, granted, actual, ps)
  if not s[7] then return end
  -- The session's fields are as apply.lua wrote them: the balance's writes
  -- above do not touch them, and this function writes them only below.
  local q = redis.call('HMGET', sk, 'line', 'ds', 'db', 'dg', 'gl')
  local p = {q[1], s[7], q[2], q[3], q[4], q[5]} -- line, dd, ds, db, dg, gl
  local line = p[1] or ''
  local d, sh, b, g = tonumber(p[2]), tonumber(p[3]), tonumber(p[4]), tonumber(p[5])
  local live = ps == '1'
  local function add(field, n)
    if live and n ~= 0 then redis.call('HINCRBY', bkey, field, string.format('%d', n)) end
  end
  local gl = {}
  for id, n in string.gmatch(p[6] or '', '([^=;]+)=(%d+)') do gl[#gl + 1] = {id, tonumber(n)} end
  if actual <= granted then
    local refund = granted - actual
    for i = #gl, 1, -1 do
      local x = math.min(refund, gl[i][2])
      if x > 0 then
        gl[i][2] = gl[i][2] - x
        refund = refund - x
        g = g - x
        redis.call('HINCRBY', gkey, 'u:' .. gl[i][1], string.format('%d', -x))
        add('gsum', -x)
        if line ~= '' then add('ug:' .. line, -x) end
      end
    end
    local x = math.min(refund, b); b = b - x; refund = refund - x
    if line ~= '' then add('ub:' .. line, -x) end
    if line == '' then
      -- a resource without lines: 'db' holds what was drawn from the limit
    else
      x = math.min(refund, sh); sh = sh - x; refund = refund - x
      add('us:' .. line, -x); add('su', -x)
      x = math.min(refund, d); d = d - x; refund = refund - x
      add('ud:' .. line, -x)
    end
  else
    local o = actual - granted
    if line == '' then b = b + o else d = d + o; add('ud:' .. line, o) end
  end
  local out = {}
  for _, e in ipairs(gl) do
    if e[2] > 0 then out[#out + 1] = e[1] .. '=' .. string.format('%d', e[2]) end
  end
  redis.call('HSET', sk, 'dd', string.format('%d', d), 'ds', string.format('%d', sh),
    'db', string.format('%d', b), 'dg', string.format('%d', g), 'gl', table.concat(out, ';'))
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local granted = s[2] + 0
local actual = ARGV[1] + 0
local refunded = 0
local overage = 0
if actual < granted then refunded = granted - actual else overage = actual - granted end
local leaked = 0
if s[1] == 'LEAKED' then leaked = 1 end

local bkey = KEYS[4]
local bl, bc, br = '', '', ''
-- The balance's charged and epoch in one read, with reserved and ps (its
-- pool counters seeded: settlePools and grantRoom read it from here; this
-- script does not write it); a balance without either of the first two
-- still exists when EXISTS says so (then charged counts as 0).
local bh = redis.call('HMGET', bkey, 'charged', 'ep', 'reserved', 'ps')
local ep = bh[2]
-- What the session's hash gets besides its settlement: the balance's epoch.
local extra = {}
if bh[1] or ep or redis.call('EXISTS', bkey) == 1 then
  -- Refuse, before any write, a usage that would overflow the period's
  -- 64-bit counter (HINCRBY would fail halfway through this script).
  local c = (bh[1] or 0) + 0
  if c + actual > 9.0e18 then
    return {7}
  end
  -- The balance counts the session when its epoch is the session's
  -- (seed.lua); one rebuilt since from a ledger without the session's open
  -- row (its row landed after the rebuild read it) holds no reservation of
  -- it to take back: it gets the actual only (issue 11, G7).
  local counted = not s[6] or s[6] == ep
  -- Never below zero (issue 22 §1): refused before any write.
  local dc, dr = actual, 0
  if leaked == 1 then
    dc = actual - granted
  elseif counted then
    dr = -granted
  end
  local r = (bh[3] or 0) + 0
  if c + dc < 0 or r + dr < 0 then
    return redis.error_reply('QCNEGATIVE finish.lua: charged ' .. string.format('%d', c) .. ' + ' ..
      string.format('%d', dc) .. ', reserved ' .. (bh[3] or '0') .. ' + ' .. string.format('%d', dr) ..
      ' of session ' .. ARGV[3] .. ' would go below zero')
  end
  -- charged always gets dc; reserved gets dr only for a USING session the
  -- balance counts (as HINCRBY by 0 would, it is written even when dr is 0).
  -- Below 2^53 (every value read and written exact as a Lua number) the
  -- new values are written by one HSET and answered as written; past it,
  -- by HINCRBY's 64-bit arithmetic, then read back.
  local writeR = leaked ~= 1 and counted
  local nc, nr = c + dc, r + dr
  if c < 9007199254740992 and r < 9007199254740992 and nc < 9007199254740992 and nr < 9007199254740992 then
    bc, br = string.format('%d', nc), bh[3]
    if writeR then
      br = string.format('%d', nr)
      redis.call('HSET', bkey, 'charged', bc, 'reserved', br)
    else
      redis.call('HSET', bkey, 'charged', bc)
    end
  else
    if writeR then
      redis.call('HINCRBY', bkey, 'reserved', string.format('%d', dr))
    end
    redis.call('HINCRBY', bkey, 'charged', string.format('%d', dc))
    local b = redis.call('HMGET', bkey, 'charged', 'reserved')
    bc, br = b[1], b[2]
  end
  if ep and ep ~= s[6] then
    extra = {'bep', ep}
  end
  bl = redis.call('GET', KEYS[3]) or '0'
end

settlePools(KEYS[1], bkey, KEYS[5], granted, actual, bh[4])
-- With pools, what the grants add to remainingQuota after the settlement
-- (grantroom.lib; '' for a plain resource or a balance gone), kept for a
-- replay as fheld and froom (not written when '': a replay reads an
-- absent one as '', so a plain resource's finish adds two fields fewer).
local gh, gr = '', ''
if bl ~= '' and bh[4] == '1' then
  local h, r = grantRoom(bkey, KEYS[5], now)
  if h then
    gh, gr = h, r
    local k = #extra
    extra[k + 1], extra[k + 2], extra[k + 3], extra[k + 4] = 'fheld', h, 'froom', r
  end
end
redis.call('HSET', KEYS[1], 'status', 'FINISHED', 'actual', ARGV[1],
  'refunded', string.format('%d', refunded), 'overage', string.format('%d', overage),
  'flimit', bl, 'fcharged', bc, 'freserved', br,
  'end', string.format('%d', now), 'leaked', leaked, unpack(extra))
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, granted, actual, refunded, overage, 0, s[3] + 0, s[5] + 0, now, leaked, s[4], bl, bc, br, gh, gr}
