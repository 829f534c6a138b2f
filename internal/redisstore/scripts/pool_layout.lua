-- pool_layout.lua: write a resource's pool layout (see pool_apply.lua for the fields).
-- KEYS[1] qc:{r}:pl
-- ARGV[1] shared  ARGV[2] buffer, then 5 values per line: name, tier, dedicated, borrowCap, base watermark (bp)
-- ARGV[1] "-": no lines; the hash is deleted.
-- Lines absent from ARGV lose their fields; live moves (w:, l:, r:, b:, n:) of
-- the others stay, and a new line starts at its tier's watermark.
if ARGV[1] == '-' then
  redis.call('DEL', KEYS[1])
  return 1
end
local keep = {}
for i = 3, #ARGV, 5 do keep[ARGV[i]] = true end
local all = redis.call('HKEYS', KEYS[1])
for _, f in ipairs(all) do
  local line = string.match(f, '^%a:(.*)$')
  if line and not keep[line] then redis.call('HDEL', KEYS[1], f) end
end
redis.call('HSET', KEYS[1], 'shared', ARGV[1], 'buffer', ARGV[2])
for i = 3, #ARGV, 5 do
  local l = ARGV[i]
  redis.call('HSET', KEYS[1], 't:' .. l, ARGV[i + 1], 'd:' .. l, ARGV[i + 2], 'c:' .. l, ARGV[i + 3])
  redis.call('HSETNX', KEYS[1], 'w:' .. l, ARGV[i + 4])
end
return 1
