-- heartbeat.lua: renew a USING session's lease.
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases
-- ARGV[1] lease ms   ARGV[2] sessionId   ARGV[3] clientId of the caller ("" = any)
-- Returns {0} not found | {1, status} not active | {2, leaseExpiresMs}
-- A session of another client is "not found": its existence is not revealed.
-- So is a CANCELLED tombstone (cancel.lua): to a client that session was
-- never granted, and the caller asks the ledger what it is.
local s = redis.call('HMGET', KEYS[1], 'status', 'client')
local st = s[1]
if not st or st == 'CANCELLED' or (ARGV[3] ~= '' and s[2] ~= ARGV[3]) then
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
