-- pool_close.lua: mark a line closing (a DELETE of it is deciding) or open
-- again. While cl:<line> is set apply.lua opens no new session on the line
-- (answer 9, pools.ErrLineClosing). The mark is not one of the line's
-- one-letter fields, so pool_layout.lua leaves it when a layout without the
-- line is written: it stays as the deleted line's tombstone, and a layout
-- written from a read older than the DELETE's commit (an apply's relayout,
-- a seed) that brings the line back into Redis does not reopen it. A PUT
-- of the line takes it off ("0").
-- KEYS[1] qc:{r}:pl
-- ARGV[1] line   ARGV[2] "1" close, "0" open again, "?" is it closing
-- Returns 1 done (closing: marked), 0 the line is not in the layout
-- (nothing written); for "?" 1 marked and 0 not.
local line = ARGV[1]
if ARGV[2] == '0' then
  redis.call('HDEL', KEYS[1], 'cl:' .. line)
  return 1
end
if ARGV[2] == '?' then
  return redis.call('HEXISTS', KEYS[1], 'cl:' .. line)
end
if redis.call('HEXISTS', KEYS[1], 't:' .. line) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'cl:' .. line, '1')
return 1
