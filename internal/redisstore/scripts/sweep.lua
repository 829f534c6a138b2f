-- sweep.lua: move USING sessions whose lease expired to LEAKED.
-- KEYS[1] qc:{r}:leases   KEYS[2] qc:{r}:leaked (set of swept ids whose ledger
--         row is not yet acknowledged as LEAKED)
-- ARGV[1] max sessions   ARGV[2] key prefix "qc:{r}:"   ARGV[3] retention ms
-- Returns a flat list of 6-tuples {sessionId, periodMs, granted, endMs, fresh,
-- clientId}: fresh 1 = swept now, 0 = swept earlier and still unacknowledged.
-- A lease is expired when lease <= now (Redis TIME). A heartbeat and a sweep
-- are both single scripts, so a session renewed in time is never swept.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[1])
local out = {}
local seen = {}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, max)
for _, id in ipairs(ids) do
  local sk = ARGV[2] .. 's:' .. id
  local s = redis.call('HMGET', sk, 'status', 'granted', 'period', 'lease', 'client')
  redis.call('ZREM', KEYS[1], id)
  if s[1] == 'USING' and tonumber(s[4]) <= now then
    local bkey = ARGV[2] .. 'b:' .. s[3]
    if redis.call('EXISTS', bkey) == 1 then
      redis.call('HINCRBY', bkey, 'reserved', string.format('%d', -tonumber(s[2])))
      redis.call('HINCRBY', bkey, 'charged', s[2])
    end
    redis.call('HSET', sk, 'status', 'LEAKED', 'end', string.format('%d', now))
    redis.call('PEXPIRE', sk, ARGV[3])
    redis.call('SADD', KEYS[2], id)
    seen[id] = true
    for _, v in ipairs({id, s[3], s[2], string.format('%d', now), '1', s[5] or ''}) do out[#out + 1] = v end
  end
end
for _, id in ipairs(redis.call('SRANDMEMBER', KEYS[2], max)) do
  if not seen[id] then
    local s = redis.call('HMGET', ARGV[2] .. 's:' .. id, 'status', 'granted', 'period', 'end', 'client')
    if not s[1] then
      redis.call('SREM', KEYS[2], id) -- expired: nothing left to report
    else
      for _, v in ipairs({id, s[3], s[2], s[4] or '0', '0', s[5] or ''}) do out[#out + 1] = v end
    end
  end
end
return out
