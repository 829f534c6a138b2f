-- pool_seed.lua: write one period's pool counters, rebuilt from the ledger, unless already there.
-- KEYS[1] qc:{r}:b:<periodMs> (must exist: seed.lua first)
-- ARGV: 5 values per line: name, dedicated, shared, buffer, grant (what its sessions hold)
-- Returns 1 when written, 0 when the counters were there (or the balance is missing: -1).
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'ps') == '1' then return 0 end
local su, gsum = 0, 0
for i = 1, #ARGV, 5 do
  local l = ARGV[i]
  redis.call('HSET', KEYS[1], 'ud:' .. l, ARGV[i + 1], 'us:' .. l, ARGV[i + 2], 'ub:' .. l, ARGV[i + 3], 'ug:' .. l, ARGV[i + 4])
  su = su + tonumber(ARGV[i + 2])
  gsum = gsum + tonumber(ARGV[i + 4])
end
redis.call('HSET', KEYS[1], 'su', string.format('%d', su), 'gsum', string.format('%d', gsum), 'ps', '1')
return 1
