-- apply.lua: check and reserve in one step; idempotent by session id.
-- KEYS[1] qc:{r}:limit          string, the resource's limit
-- KEYS[2] qc:{r}:b:<periodMs>   hash {charged, reserved} of the period
-- KEYS[3] qc:{r}:s:<sessionId>  hash, the session
-- KEYS[4] qc:{r}:leases         zset sessionId -> lease expiry (ms)
-- ARGV[1] amount   ARGV[2] minAmount (0 = all-or-nothing)   ARGV[3] clientId
-- ARGV[4] period start ms   ARGV[5] period end ms (0 = never)
-- ARGV[6] lease ms   ARGV[7] sessionId   ARGV[8] "1" = first period (no lower bound)
-- ARGV[9] the attempt: a token of this apply request ("" = none; go-redis
--         resends of one request carry the same). A grant keeps it in the
--         session ('att') with the balance's epoch ('bep', see seed.lua); a
--         replay by another attempt removes it: the session is then no
--         longer "only the attempt that made it", and a give-back keyed by
--         that attempt (cancel.lua ARGV[4], the compensation of an apply
--         answered 503 whose script ran late) leaves it alone. So a retry
--         that replays the session and writes its row cannot have it
--         cancelled under it (issue 11 §3.1).
-- KEYS[5] qc:{r}:s:<scopedId>  ARGV[10] scopedId ("" = none: KEYS[5] is not read)
--   Session ids are scoped to (resource, client) (internal/quota scope.go):
--   scoped_session.lib says whether the session is the bare or the scoped
--   one; for the scoped one every code is returned plus 10 (11 granted
--   under the scoped id, …).
-- Returns {code, granted, remaining, leaseExpiresMs, startMs, periodStartMs, nowMs}
--   and, for code 3 and for code 2 of a session restored from the ledger
--   (no remaining of its own), limit, charged, reserved as decimal strings appended
--   (the caller computes what remains exactly: overage can push charged past
--   2^53, where Lua's doubles round).
--   code 1 granted, 2 replayed (first answer), 3 exhausted (nothing changed),
--   4 wrong period (nothing changed), 5 need balance (nothing changed),
--   6 conflict (session id exists with other arguments).
-- Time is Redis TIME: one clock for every instance.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The resource's limit and the period's {charged, reserved}; nil when one is
-- missing (then code 5: the caller seeds the period and retries).
-- b[3] is the balance's epoch ('ep', seed.lua), kept on a granted session.
local function balance()
  local limit = redis.call('GET', KEYS[1])
  local b = redis.call('HMGET', KEYS[2], 'charged', 'reserved', 'ep')
  if not limit or not b[1] or not b[2] then
    return nil
  end
  return limit, b
end

-- include scoped_session.lib
local sk, sid, form, s = scopedSession(KEYS[3], KEYS[5], ARGV[7], ARGV[10], ARGV[3],
  {'amount', 'min', 'client', 'granted', 'remaining', 'lease', 'start', 'period', 'status', 'att'}, 3, 9)
if s[9] == 'CANCELLED' then
  -- A tombstone of an apply that answered 503: a retry starts afresh.
  redis.call('DEL', sk)
  s[1] = false
end
if s[1] then
  if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or s[3] ~= ARGV[3] then
    return {6 + form, 0, 0, 0, 0, 0, now}
  end
  if s[10] and s[10] ~= ARGV[9] then
    redis.call('HDEL', sk, 'att')
  end
  if s[5] then
    return {2 + form, tonumber(s[4]), tonumber(s[5]), tonumber(s[6]), tonumber(s[7]), tonumber(s[8]), now}
  end
  -- A session restored from the ledger after Redis lost it (seed.lua): the
  -- first answer's remaining is not known, so the replay answers the
  -- current one, returned as limit, charged, reserved like code 3.
  local limit, b = balance()
  if not limit then
    return {5 + form, 0, 0, 0, 0, 0, now}
  end
  return {2 + form, tonumber(s[4]), 0, tonumber(s[6]), tonumber(s[7]), tonumber(s[8]), now, limit, b[1], b[2]}
end

local pstart = tonumber(ARGV[4])
local pend = tonumber(ARGV[5])
if (now < pstart and ARGV[8] ~= '1') or (pend > 0 and now >= pend) then
  return {4 + form, 0, 0, 0, 0, 0, now}
end

local limit, b = balance()
if not limit then
  return {5 + form, 0, 0, 0, 0, 0, now}
end

local remaining = tonumber(limit) - tonumber(b[1]) - tonumber(b[2])
local amount = tonumber(ARGV[1])
local min = tonumber(ARGV[2])
local grant = amount
if remaining < amount then
  if min > 0 and remaining >= min then
    grant = remaining
  else
    return {3 + form, 0, 0, 0, 0, 0, now, limit, b[1], b[2]}
  end
end

-- Numbers go back to Redis formatted with %d: Lua's default %.14g would turn
-- large amounts into 1e+15, which HINCRBY rejects.
local lease = now + tonumber(ARGV[6])
redis.call('HINCRBY', KEYS[2], 'reserved', string.format('%d', grant))
-- The session in one write, with the attempt and the epoch when there are.
local w = {'amount', ARGV[1], 'min', ARGV[2], 'client', ARGV[3],
  'granted', string.format('%d', grant), 'remaining', string.format('%d', remaining - grant),
  'lease', string.format('%d', lease), 'start', string.format('%d', now),
  'period', ARGV[4], 'status', 'USING'}
if ARGV[9] ~= '' then
  w[#w + 1] = 'att'
  w[#w + 1] = ARGV[9]
end
if b[3] then
  w[#w + 1] = 'bep'
  w[#w + 1] = b[3]
end
redis.call('HSET', sk, unpack(w))
redis.call('ZADD', KEYS[4], lease, sid)
return {1 + form, grant, remaining - grant, lease, now, pstart, now}
