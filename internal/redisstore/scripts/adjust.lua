-- adjust.lua: correct a period's balance by deltas found by reconciliation.
-- KEYS[1] qc:{r}:b:<periodMs>   ARGV[1] charged delta   ARGV[2] reserved delta
-- Returns 1 when applied, 0 when the balance does not exist (it will be
-- seeded from the ledger, which needs no correction).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'charged', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[2])
return 1
