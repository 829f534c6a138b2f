-- failopen.lua: flag a USING session kept by a failMode OPEN policy although
-- its ledger row could not be written; reconciliation writes the row.
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:failopen (set of such ids)
-- ARGV[1] sessionId
-- Returns 1 when flagged, 0 when the session is missing or not USING.
if redis.call('HGET', KEYS[1], 'status') ~= 'USING' then
  return 0
end
redis.call('HSET', KEYS[1], 'fo', '1')
redis.call('SADD', KEYS[2], ARGV[1])
return 1
