-- uncharge.lua: give back an amount charge.lua added (another resource of
-- the same request refused, or the ledger row could not be written).
-- KEYS[1] qc:{r}:b:<periodMs>   ARGV[1] amount
-- Returns 1 when given back, 0 when the period's balance is gone (a rebuild
-- from the ledger, which has no row of the charge, already left it out).
-- An error reply QCNEGATIVE (nothing changed) when charged would go below
-- zero.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local c = tonumber(redis.call('HGET', KEYS[1], 'charged') or '0')
if c - tonumber(ARGV[1]) < 0 then
  return redis.error_reply('QCNEGATIVE uncharge.lua: charged ' .. string.format('%d', c) .. ' - ' .. ARGV[1] ..
    ' would go below zero')
end
redis.call('HINCRBY', KEYS[1], 'charged', string.format('%d', -tonumber(ARGV[1])))
return 1
