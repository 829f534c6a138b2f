-- expired.lua: list what sweep.lua is to look at; changes nothing.
-- KEYS[1] qc:{r}:leases   KEYS[2] qc:{r}:leaked
-- ARGV[1] most expired ids   ARGV[2] most leaked ids
-- Returns {expired, leaked, next}: expired, up to ARGV[1] ids of the lease
-- index whose lease ended (score <= now, Redis TIME), earliest first;
-- leaked, up to ARGV[2] random ids of swept sessions whose ledger row is not
-- yet acknowledged as LEAKED; next, the ms from now until the earliest
-- lease that has not ended yet ends, -1 when there is none (the sweeper
-- need not look again before then unless the resource changes). The caller reads those sessions' periods and passes
-- their keys to sweep.lua, which checks everything again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local nxt = -1
if #later == 2 then
  nxt = tonumber(later[2]) - now
end
return {redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1])),
  redis.call('SRANDMEMBER', KEYS[2], tonumber(ARGV[2])), nxt}
