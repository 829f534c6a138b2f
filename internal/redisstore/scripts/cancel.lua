-- cancel.lua: give back a USING reservation whose ledger row was not written
-- (or whose write had an unknown outcome).
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases
-- ARGV[1] sessionId   ARGV[2] balance key prefix "qc:{r}:b:"   ARGV[3] tombstone retention ms
-- Returns 1 when a reservation was given back, 0 when there was none (missing
-- or already settled): cancelling twice gives back once.
-- The session stays as a CANCELLED tombstone for ARGV[3]: if the ledger row
-- was written after all, reconciliation finds the tombstone and settles the
-- row with nothing charged; a rebuild does not bring the session back; a
-- repeated apply with the same id starts afresh.
local s = redis.call('HMGET', KEYS[1], 'status', 'granted', 'period')
if s[1] ~= 'USING' then
  return 0
end
local bkey = ARGV[2] .. s[3]
if redis.call('EXISTS', bkey) == 1 then
  redis.call('HINCRBY', bkey, 'reserved', string.format('%d', -tonumber(s[2])))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'end', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
