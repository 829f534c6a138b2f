-- pool_grants.lua: write a resource's temporary grants back after Redis lost them.
-- KEYS[1] qc:{r}:gr (see apply.lua)
-- KEYS[1 + i] qc:{r}:s:<sessionId> of the i-th open session of ARGV (i = 1..)
-- ARGV[1] n, the number of grants; then 3 values per grant: id,
--   "amount|effectiveMs|expiresMs|line", held by finished sessions (rebuilt
--   from the ledger); then one value per open session (USING or LEAKED in
--   the ledger): its grant list "id=n;id=n" as the ledger holds it
-- An open session whose Redis session is FINISHED or CANCELLED now settled
-- after the ledger was read: what Redis settled it to ('gl'; '' when
-- cancelled) counts instead of the ledger's draw, as in pool_seed.lua.
-- The field "u:#" = "1" marks a hash written (or checked) this way: when it is
-- there, nothing is written. A finish may have added a u:<id> to a lost hash
-- in between: the rebuilt value replaces it (and counts that finish).
-- Returns 1 when written, 0 when the hash was already marked.
if redis.call('HGET', KEYS[1], 'u:#') == '1' then return 0 end
local n = tonumber(ARGV[1])
local held = {}
local k = 1
for i = 2 + 3 * n, #ARGV do
  k = k + 1
  local gl = ARGV[i]
  local s = redis.call('HMGET', KEYS[k], 'status', 'dd', 'gl')
  if (s[1] == 'FINISHED' or s[1] == 'CANCELLED') and s[2] then gl = s[3] or '' end
  for id, x in string.gmatch(gl, '([^=;]+)=(%d+)') do held[id] = (held[id] or 0) + tonumber(x) end
end
for i = 2, 1 + 3 * n, 3 do
  local id = ARGV[i]
  redis.call('HSET', KEYS[1], id, ARGV[i + 1], 'u:' .. id, string.format('%d', tonumber(ARGV[i + 2]) + (held[id] or 0)))
end
redis.call('HSET', KEYS[1], 'u:#', '1')
return 1
