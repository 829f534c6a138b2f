-- cancel.lua: give back a USING reservation whose ledger row was not written
-- (or whose write had an unknown outcome).
-- KEYS[1] qc:{r}:s:<sessionId>   KEYS[2] qc:{r}:leases
-- KEYS[3] qc:{r}:b:<periodMs>    the balance of the period the caller expects
--         the session in (its period is in the session hash, which the caller
--         has not read: a guess, checked here)
-- KEYS[4] qc:{r}:gr   the resource's temporary grants (pools; see apply.lua)
-- ARGV[1] sessionId   ARGV[2] tombstone retention ms   ARGV[3] periodMs of KEYS[3]
-- ARGV[4] an apply's attempt token ("" = any): give back only the
--         reservation that attempt made and no other apply has replayed
--         since ('att', apply.lua): the compensation of an apply answered
--         503 whose script ran late (issue 11 §3.1)
-- Returns {code} or {code, periodMs}:
--   {0} nothing to give back (missing or already settled): cancelling twice
--       gives back once
--   {1} the reservation was given back
--   {2, periodMs} the session is in another period than ARGV[3]: nothing
--       changed; call again with that period's balance key
--   {3} (ARGV[4] given) the session is USING but not that attempt's alone:
--       nothing changed
--   {4} (ARGV[4] given) no such session (yet: the attempt's script may
--       still be queued): nothing changed
-- The balance loses the grant only if it counts it: the session's epoch
-- ('bep', absent in sessions older than epochs) is the balance's ('ep',
-- seed.lua). A session reserved in a balance that was rebuilt since without
-- it (a failover's repair, a ledger without its row) becomes a tombstone
-- and takes nothing from the rebuilt balance, which never counted it.
-- The session stays as a CANCELLED tombstone for ARGV[2]: if the ledger row
-- was written after all, reconciliation finds the tombstone and settles the
-- row with nothing charged; a rebuild does not bring the session back; a
-- repeated apply with the same id starts afresh.
-- An error reply QCNEGATIVE (nothing changed) when the give-back would leave
-- the balance's reserved below zero.
-- A pools' session (apply.lua: 'dd' set) gives its whole grant back
-- to the pools it drew from (internal/pools, Model.Cancel): each temporary
-- grant its part ('u:<id>' of KEYS[4], every period), and, when the
-- period's pool counters are seeded ('ps') in a balance that counts the
-- session (its epoch, as for 'reserved'), the line's dedicated, shared
-- and buffer counters and the grants' sum; its split is zeroed, as a
-- finish with nothing used would leave it. The grants' 'u:<id>' are not
-- rebuilt with the balance: they count the session while it exists (its
-- grant wrote both in one script).
-- include session_record.lib
local s = sessionGet(KEYS[1], {'status', 'granted', 'period', 'att', 'bep'})
if ARGV[4] ~= '' and not s[1] then
  return {4}
end
if s[1] ~= 'USING' then
  return {0}
end
if ARGV[4] ~= '' and s[4] ~= ARGV[4] then
  return {3}
end
if s[3] ~= ARGV[3] then
  return {2, s[3]}
end
local counted = redis.call('EXISTS', KEYS[3]) == 1 and (not s[5] or s[5] == redis.call('HGET', KEYS[3], 'ep'))
if counted then
  -- Never below zero (issue 22 §1): a balance that no longer holds this
  -- reservation gave it back already; refuse before any write.
  local r = tonumber(redis.call('HGET', KEYS[3], 'reserved') or '0')
  if r - tonumber(s[2]) < 0 then
    return redis.error_reply('QCNEGATIVE cancel.lua: reserved ' .. string.format('%d', r) .. ' - ' .. s[2] ..
      ' of session ' .. ARGV[1] .. ' would go below zero')
  end
  redis.call('HINCRBY', KEYS[3], 'reserved', string.format('%d', -tonumber(s[2])))
end
local p = redis.call('HMGET', KEYS[1], 'line', 'dd', 'ds', 'db', 'dg', 'gl')
if p[2] then
  local line = p[1] or ''
  -- The period's pool counters live in the balance and are rebuilt with it
  -- (pool_seed.lua, from the ledger): a balance that does not count the
  -- session (another epoch) has counters that do not either.
  local live = counted and redis.call('HGET', KEYS[3], 'ps') == '1'
  local function add(field, v)
    local n = tonumber(v or '0')
    if live and n ~= 0 then redis.call('HINCRBY', KEYS[3], field, string.format('%d', -n)) end
  end
  for id, n in string.gmatch(p[6] or '', '([^=;]+)=(%d+)') do
    redis.call('HINCRBY', KEYS[4], 'u:' .. id, '-' .. n)
  end
  add('gsum', p[5])
  if line ~= '' then
    add('ud:' .. line, p[2]); add('us:' .. line, p[3]); add('su', p[3])
    add('ub:' .. line, p[4]); add('ug:' .. line, p[5])
  end
  redis.call('HSET', KEYS[1], 'dd', '0', 'ds', '0', 'db', '0', 'dg', '0', 'gl', '')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'end', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
return {1}
