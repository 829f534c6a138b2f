-- adjust.lua: correct a period's balance by deltas found by reconciliation,
-- once per call however often the call is sent (known gap G8: go-redis sends
-- a command again after a read timeout, and a correction applied twice
-- would make a drift of its own).
-- KEYS[1] qc:{r}:b:<periodMs>   KEYS[2] qc:{r}:adj:<token>, the call's mark
-- KEYS[3] qc:{r}:lock:<name>, the lock the correction is made under
-- ARGV[1] charged delta   ARGV[2] reserved delta
-- ARGV[3] how long the mark is kept, ms (longer than any resend)
-- ARGV[4] the caller's lock token ("" = not fenced)
-- Returns 1 when applied, 2 when this call (its token) was applied before
-- (a resend: nothing changed), 0 when the balance does not exist (it will be
-- seeded from the ledger, which needs no correction), 3 when KEYS[3] does
-- not hold ARGV[4]: the caller's lock expired and may be another
-- reconciler's now (issue 11 §3.4, fencing), so its drift, measured before,
-- is not written.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[4] then
  return 3
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'charged', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
return 1
