-- pool_grants.lua: write a resource's temporary grants back after Redis lost them.
-- KEYS[1] qc:{r}:gr (see pool_apply.lua)
-- ARGV: 3 values per grant: id, "amount|effectiveMs|expiresMs|line", held (what
--   sessions hold of it, rebuilt from the ledger)
-- The field "u:#" = "1" marks a hash written (or checked) this way: when it is
-- there, nothing is written. A finish may have added a u:<id> to a lost hash
-- in between: the rebuilt value replaces it.
-- Returns 1 when written, 0 when the hash was already marked.
if redis.call('HGET', KEYS[1], 'u:#') == '1' then return 0 end
for i = 1, #ARGV, 3 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1], 'u:' .. ARGV[i], ARGV[i + 2])
end
redis.call('HSET', KEYS[1], 'u:#', '1')
return 1
