-- seed.lua: write a period's balance (and the resource's limit) if absent.
-- KEYS[1] qc:{r}:limit   KEYS[2] qc:{r}:b:<periodMs>
-- ARGV[1] limit   ARGV[2] charged   ARGV[3] reserved   ARGV[4] expire-at ms (0 = never)
-- Returns 1 when the balance was written, 0 when it was already there (a
-- concurrent seeder won; its values stand).
redis.call('SET', KEYS[1], ARGV[1], 'NX')
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('HSET', KEYS[2], 'charged', ARGV[2], 'reserved', ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[4])
end
return 1
