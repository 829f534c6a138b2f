-- cancel.lua: give back a USING reservation whose ledger row was not written
-- (or whose write had an unknown outcome).
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases
-- KEYS[3] qc:{r}:b:<periodMs>    the balance of the period the caller expects
--         the session in (its period is in the session hash, which the caller
--         has not read: a guess, checked here)
-- ARGV[1] sessionId   ARGV[2] tombstone retention ms   ARGV[3] periodMs of KEYS[3]
-- Returns {code} or {code, periodMs}:
--   {0} nothing to give back (missing or already settled): cancelling twice
--       gives back once
--   {1} the reservation was given back
--   {2, periodMs} the session is in another period than ARGV[3]: nothing
--       changed; call again with that period's balance key
-- The session stays as a CANCELLED tombstone for ARGV[2]: if the ledger row
-- was written after all, reconciliation finds the tombstone and settles the
-- row with nothing charged; a rebuild does not bring the session back; a
-- repeated apply with the same id starts afresh.
local s = redis.call('HMGET', KEYS[1], 'status', 'granted', 'period')
if s[1] ~= 'USING' then
  return {0}
end
if s[3] ~= ARGV[3] then
  return {2, s[3]}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HINCRBY', KEYS[3], 'reserved', string.format('%d', -tonumber(s[2])))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'end', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
return {1}
