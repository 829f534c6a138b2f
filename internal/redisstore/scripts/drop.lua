-- drop.lua: drop one period's balance of a resource, so that the next apply
-- rebuilds it from the ledger (the failover repair, internal/failover), only
-- while the caller holds the period's seed lock.
-- KEYS[1] qc:{r}:b:<periodMs>   KEYS[2] qc:{r}:lock:<name>, the seed lock
-- ARGV[1] the caller's lock token ("" = not fenced)
-- Returns 1 when the balance was dropped, 0 when there was none, 3 when
-- KEYS[2] does not hold ARGV[1]: the caller's lock expired while it was cut
-- off and may be another seeder's now, whose fresh balance must not be
-- dropped (issue 11 §3.4, fencing, as seed.lua and adjust.lua): nothing is
-- changed.
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 3
end
return redis.call('DEL', KEYS[1])
