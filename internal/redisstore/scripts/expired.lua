-- expired.lua: list what sweep.lua is to look at; changes nothing.
-- KEYS[1] qc:{r}:leases   KEYS[2] qc:{r}:leaked
-- ARGV[1] most expired ids   ARGV[2] most leaked ids
-- Returns {expired, leaked}: expired, up to ARGV[1] ids of the lease index
-- whose lease ended (score <= now, Redis TIME), earliest first; leaked, up
-- to ARGV[2] random ids of swept sessions whose ledger row is not yet
-- acknowledged as LEAKED. The caller reads those sessions' periods and passes
-- their keys to sweep.lua, which checks everything again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1])),
  redis.call('SRANDMEMBER', KEYS[2], tonumber(ARGV[2]))}
