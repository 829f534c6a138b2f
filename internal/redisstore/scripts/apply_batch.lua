-- apply_batch.lua: apply.lua's fast path for several new sessions of one
-- plain resource's period in one script, each decided in turn on what the
-- ones before it left (the same decision, in the same order, as that many
-- apply.lua calls; a randomized test holds the two together). The pipeline
-- (internal/redisstore batchapply.go) sends it in place of the applies of a
-- pipeline that would each take apply.lua's fast path: Redis's CPU per
-- apply is the ceiling of one hot resource (issue 23 §3), and most of it is
-- the fixed cost of a script call and of each redis.call, which n applies
-- here pay once (the clock, the limit, the balance, the existence check, the
-- reservation and the lease index) instead of n times; only the session's
-- own write is per apply.
-- KEYS[1] qc:{r}:limit   KEYS[2] qc:{r}:b:<periodMs>   KEYS[3] qc:{r}:leases
-- then per apply i (1..n): KEYS[2+2i] qc:{r}:s:<sessionId>, KEYS[3+2i]
--   qc:{r}:s:<scopedId> (no key twice: the caller's batches never hold two
--   applies of one session key)
-- ARGV[1] period start ms   ARGV[2] period end ms (0 = never)   ARGV[3] "1" =
--   first period; then per apply i, from ARGV[6i-2]: amount, minAmount
--   (0 = all-or-nothing), clientId, lease ms, sessionId, the attempt (not
--   "": with a scoped id, the fast path's condition)
-- Returns n elements, apply i's answer as apply.lua would give it: granted
-- {1, granted, remaining, nowMs} (the fast path's short answer), refused
-- its 18 (reason EXHAUSTED; reserved as it stood for this apply), or 0:
-- not decided here, nothing written for it (the period not open, the
-- balance or limit not seeded or without its epoch, the session exists,
-- reserved would pass 2^53): the caller sends that apply to apply.lua on
-- its own, after this script, which decides it from scratch.
-- Writes in apply.lua's order: the reservation of every grant (one
-- HINCRBY), then each session, then the leases (one ZADD).
local n = (#ARGV - 3) / 6
local out = {}
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limitStr = redis.call('GET', KEYS[1])
local b = redis.call('HMGET', KEYS[2], 'charged', 'reserved', 'ep')
local charged, held, ep = b[1], b[2], b[3]
if not ((ARGV[3] == '1' or now >= ARGV[1] + 0) and (ARGV[2] == '0' or now < ARGV[2] + 0)
    and limitStr and charged and held and ep) then
  for i = 1, n do out[i] = 0 end
  return out
end
-- One EXISTS of every session key: none exists (the common case) settles
-- every apply; else each apply's two keys are asked.
local exist = redis.call('EXISTS', unpack(KEYS, 4))
local cur, total = held + 0, 0
local g = {} -- granted: i, granted, remaining, lease expiry (decimal strings)
local leaseMs, ls -- the last lease asked (ms) and its expiry: one format for a run of equal leases
for i = 1, n do
  out[i] = 0
  if exist == 0 or redis.call('EXISTS', KEYS[2 + 2 * i], KEYS[3 + 2 * i]) == 0 then
    local o = 6 * i - 2
    local amount = ARGV[o] + 0
    local base = limitStr - charged - cur
    local m, granted = amount, ARGV[o]
    if base < amount then
      local min = ARGV[o + 1] + 0
      if min > 0 and base >= min then
        m, granted = base, string.format('%d', base)
      else
        m = nil
        out[i] = {3, 0, '', 0, 0, 0, now, limitStr, charged, string.format('%d', cur), 'EXHAUSTED', 0, 0, 0, 0, 0, 0, ''}
      end
    end
    if m and cur + m < 9007199254740992 then
      cur, total = cur + m, total + m
      out[i] = {1, m, base - m, now}
      if ARGV[o + 3] ~= leaseMs then
        leaseMs = ARGV[o + 3]
        ls = string.format('%d', now + leaseMs)
      end
      local k = #g
      g[k + 1], g[k + 2], g[k + 3], g[k + 4] = i, granted, string.format('%d', base - m), ls
    end
  end
end
if total ~= 0 then
  redis.call('HINCRBY', KEYS[2], 'reserved', string.format('%d', total))
end
local st, per, z = string.format('%d', now), ARGV[1], {}
for k = 1, #g, 4 do
  local i, o = g[k], 6 * g[k] - 2
  local sk, amt, minAmt, client, att = KEYS[2 + 2 * i], ARGV[o], ARGV[o + 1], ARGV[o + 2], ARGV[o + 5]
  local granted, rem, ls = g[k + 1], g[k + 2], g[k + 3]
  -- include fast_session.lib
  z[#z + 1] = ls
  z[#z + 1] = ARGV[o + 4]
end
if #z > 0 then
  redis.call('ZADD', KEYS[3], unpack(z))
end
return out
