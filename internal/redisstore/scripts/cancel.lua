-- cancel.lua: give back a USING reservation whose ledger row was not written.
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases
-- ARGV[1] sessionId   ARGV[2] balance key prefix "qc:{r}:b:"
-- Returns 1 when a reservation was given back, 0 when there was none (missing
-- or already settled): cancelling twice gives back once.
local s = redis.call('HMGET', KEYS[1], 'status', 'granted', 'period')
if s[1] ~= 'USING' then
  return 0
end
local bkey = ARGV[2] .. s[3]
if redis.call('EXISTS', bkey) == 1 then
  redis.call('HINCRBY', bkey, 'reserved', string.format('%d', -tonumber(s[2])))
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
