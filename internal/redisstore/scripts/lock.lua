-- lock.lua: take a lock, idempotently for its holder, or renew it.
-- KEYS[1] qc:{r}:lock:<name>   ARGV[1] the caller's token   ARGV[2] ttl ms
-- Returns 1 when the caller holds the lock for ARGV[2] from now (taken now,
-- or already its own: a resent call, or a renewal while the holder works),
-- 0 when another token holds it.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
