-- failopen.lua: flag a USING session kept by a failMode OPEN policy although
-- its ledger row could not be written; reconciliation writes the row.
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:failopen (set of such ids)
-- ARGV[1] sessionId
-- Returns 1 when flagged, 0 when the session is missing or not USING.
-- A pools' session ('dd' set by apply.lua) also keeps the split its grant
-- drew, as 'fod' = "dd|ds|db|dg|gl": finish.lua overwrites dd..gl with what
-- the session stays charged to, and the ledger row reconciliation writes
-- needs the draw at apply (its drawn_* columns, which a rebuild settles
-- again from the row's charge; open finding B, docs/pools.md §5).
local s = redis.call('HMGET', KEYS[1], 'status', 'dd', 'ds', 'db', 'dg', 'gl')
if s[1] ~= 'USING' then
  return 0
end
if s[2] then
  redis.call('HSET', KEYS[1], 'fo', '1', 'fod', s[2] .. '|' .. (s[3] or '0') .. '|' .. (s[4] or '0') .. '|' ..
    (s[5] or '0') .. '|' .. (s[6] or ''))
else
  redis.call('HSET', KEYS[1], 'fo', '1')
end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
