-- failopen_scope.lua: move a fail-open session (failopen.lua) from its bare
-- id to its scoped id "<resource>/<client>/<id>" (internal/quota scope.go),
-- for reconciliation: the bare id's ledger row is another session's (another
-- resource's or client's), so the session's row can only be written under
-- the scoped id, and the stores must agree on the id (issue: open finding A,
-- docs/pools.md §5). The session hash is renamed whole (its state, split
-- and 'fo' flag kept), and its id is replaced in the lease index, the
-- fail-open set and the set of swept sessions awaiting acknowledgement.
-- A heartbeat, finish or replay of the session with its client id then
-- finds it under the scoped id, as any scoped session (scoped_session.lib).
-- KEYS[1] qc:{r}:s:<bareId>   KEYS[2] qc:{r}:s:<scopedId>
-- KEYS[3] qc:{r}:leases       KEYS[4] qc:{r}:failopen   KEYS[5] qc:{r}:leaked
-- ARGV[1] bareId   ARGV[2] scopedId   ARGV[3] the session's client id
-- Returns 1 when moved, 0 when the bare session is missing, not flagged
-- 'fo' or not the client's (nothing changed), 2 when a live session is
-- stored under the scoped id already (nothing changed). A CANCELLED
-- tombstone under the scoped id is replaced.
local s = redis.call('HMGET', KEYS[1], 'fo', 'client')
if s[1] ~= '1' or s[2] ~= ARGV[3] then
  return 0
end
local t = redis.call('HGET', KEYS[2], 'status')
if t and t ~= 'CANCELLED' then
  return 2
end
redis.call('RENAME', KEYS[1], KEYS[2])
local lease = redis.call('ZSCORE', KEYS[3], ARGV[1])
if lease then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[3], lease, ARGV[2])
end
if redis.call('SREM', KEYS[4], ARGV[1]) == 1 then
  redis.call('SADD', KEYS[4], ARGV[2])
end
if redis.call('SREM', KEYS[5], ARGV[1]) == 1 then
  redis.call('SADD', KEYS[5], ARGV[2])
end
return 1
