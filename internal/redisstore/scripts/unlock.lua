-- unlock.lua: release a lock only if the caller still holds it.
-- KEYS[1] qc:{r}:lock:<name>   ARGV[1] the holder's token
-- Returns 1 when released, 0 when the lock was gone or held by another.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
