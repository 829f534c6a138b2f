-- pool_close.lua: mark a line closing (a DELETE of it is deciding) or open
-- again. While x:<line> is set apply.lua opens no new session on the line
-- (answer 9, pools.ErrLineClosing); pool_layout.lua removes the mark with
-- the line's other fields when a layout without the line is written.
-- KEYS[1] qc:{r}:pl
-- ARGV[1] line   ARGV[2] "1" close, "0" open again, "?" is it closing
-- Returns 1 done (closing: marked, or still marked), 0 the line is not in
-- the layout (nothing written), for "?" 1 marked and 0 not.
local line = ARGV[1]
if ARGV[2] == '0' then
  redis.call('HDEL', KEYS[1], 'x:' .. line)
  return 1
end
if ARGV[2] == '?' then
  return redis.call('HEXISTS', KEYS[1], 'x:' .. line)
end
if redis.call('HEXISTS', KEYS[1], 't:' .. line) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'x:' .. line, '1')
return 1
