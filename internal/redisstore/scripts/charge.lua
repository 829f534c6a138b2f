-- charge.lua: charge an amount with no session (a gateway's apply and finish
-- in one step): check what remains, then add the amount to charged.
-- KEYS[1] qc:{r}:limit   KEYS[2] qc:{r}:b:<periodMs>
-- ARGV[1] amount (0 … 2^53−1) added to charged
-- ARGV[2] need: -1 never refused (usage that already happened; past the
--         limit it is overage), 0 refused when nothing remains, n > 0
--         refused when less than n remains
-- ARGV[3] period start ms   ARGV[4] period end ms (0 = never)
-- ARGV[5] "1" = first period (no lower bound)
-- Returns {code, nowMs} or {code, nowMs, limit, charged, reserved}, the
--   balance as decimal strings BEFORE the charge (the caller computes what
--   remains exactly, past 2^53 too):
--   code 1 charged, 3 refused (nothing changed), 4 wrong period (nothing
--   changed), 5 need balance (nothing changed), 7 the amount would overflow
--   the period's counter (nothing changed).
-- The decision is chargeDecision in charge.go (the Go reference model).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local pstart = tonumber(ARGV[3])
local pend = tonumber(ARGV[4])
if (now < pstart and ARGV[5] ~= '1') or (pend > 0 and now >= pend) then
  return {4, now}
end
local limit = redis.call('GET', KEYS[1])
local b = redis.call('HMGET', KEYS[2], 'charged', 'reserved')
if not limit or not b[1] or not b[2] then
  return {5, now}
end

local amount = tonumber(ARGV[1])
local need = tonumber(ARGV[2])
local remaining = tonumber(limit) - tonumber(b[1]) - tonumber(b[2])
if (need == 0 and remaining <= 0) or (need > 0 and remaining < need) then
  return {3, now, limit, b[1], b[2]}
end
if tonumber(b[1]) + amount > 9.0e18 then
  return {7, now}
end
if amount > 0 then
  redis.call('HINCRBY', KEYS[2], 'charged', string.format('%d', amount))
end
return {1, now, limit, b[1], b[2]}
