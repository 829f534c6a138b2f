-- heartbeat.lua: renew a USING session's lease.
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases
-- ARGV[1] lease ms   ARGV[2] sessionId
-- Returns {0} not found | {1, status} not active | {2, leaseExpiresMs}
local st = redis.call('HGET', KEYS[1], 'status')
if not st then
  return {0}
end
if st ~= 'USING' then
  return {1, st}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = now + tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'lease', string.format('%d', lease))
redis.call('ZADD', KEYS[2], lease, ARGV[2])
return {2, lease}
