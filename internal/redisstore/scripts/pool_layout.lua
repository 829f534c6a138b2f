-- pool_layout.lua: write a resource's pool layout (see apply.lua for the fields).
-- KEYS[1] qc:{r}:pl
-- ARGV[1] shared  ARGV[2] buffer
-- ARGV[3] restore: "?" = none given, else n, followed by n field/value pairs:
--   the live moves (w:, b:, l:, r:, sbuf) rebuilt from the policy store, written
--   only when the hash is absent (Redis lost it, or the first layout)
-- then 5 values per line: name, tier, dedicated, borrowCap, base watermark (bp)
-- ARGV[1] "-": no lines; the hash is deleted.
-- A fresh hash gets 'ep', its epoch. Lines absent from ARGV lose their fields; live moves (w:, l:, r:, b:, n:) of
-- the others stay (but a line whose tier changed starts again at its new tier's watermark), and a new line
-- starts at its tier's watermark; lent buffer (sbuf, b:) is cut back to the
-- buffer (below).
-- Returns {1, line, cut, line, cut, …} when written: the lent buffer cut back (below), in cut order, line ""
-- for the shared pool's (sbuf); the caller journals each as a RETURN pool event, as pools.Model.Relayout
-- reports them. {0} when the hash is absent and ARGV[3] is "?" (nothing written: call again with the moves
-- rebuilt).
local HT = 'keeps this hash a hashtable, not a listpack: see pool_layout.lua and docs/pools.md (section 6)'
if ARGV[1] == '-' then
  redis.call('DEL', KEYS[1])
  return {1}
end
local fresh = redis.call('HEXISTS', KEYS[1], 'shared') == 0
local first = 4
if ARGV[3] == '?' then
  if fresh then return {0} end
else
  local n = tonumber(ARGV[3])
  first = 4 + 2 * n
  if fresh then
    redis.call('DEL', KEYS[1]) -- no stray field of a half-lost hash
    for i = 4, first - 1, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
    -- ep: this copy's epoch (Redis TIME, µs): a new one tells the controller
    -- the consumption counters (n:) started again (pools.Model.Epoch).
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[1], 'ep', t[1] .. string.format('%06d', tonumber(t[2])))
  end
end
local keep = {}
for i = first, #ARGV, 5 do keep[ARGV[i]] = true end
local all = redis.call('HKEYS', KEYS[1])
for _, f in ipairs(all) do
  local line = string.match(f, '^%a:(.*)$')
  if line and not keep[line] then redis.call('HDEL', KEYS[1], f) end
end
-- 'ht': a value past Redis' hash-max-listpack-value (64 bytes by default)
-- keeps this hash in the hashtable encoding: a listpack of a dozen lines'
-- fields is searched linearly by every apply's HMGET (docs/pools.md §6).
redis.call('HSET', KEYS[1], 'shared', ARGV[1], 'buffer', ARGV[2], 'ht', HT)
for i = first, #ARGV, 5 do
  local l = ARGV[i]
  local was = redis.call('HGET', KEYS[1], 't:' .. l)
  redis.call('HSET', KEYS[1], 't:' .. l, ARGV[i + 1], 'd:' .. l, ARGV[i + 2], 'c:' .. l, ARGV[i + 3])
  if was and was ~= ARGV[i + 1] then
    -- a new tier starts at its own watermark (pools.Model.Relayout; the
    -- caller journals it as a WATERMARK_TIER event)
    redis.call('HSET', KEYS[1], 'w:' .. l, ARGV[i + 4])
  else
    redis.call('HSETNX', KEYS[1], 'w:' .. l, ARGV[i + 4])
  end
end
-- Lent buffer never passes the buffer: a smaller one (a lower bufferPercent
-- or limit) cuts it back, the shared pool's (sbuf) first, then the lines' in
-- ARGV's order, as pools.Moves.Fields bounds a rebuild and pools.Model.Relayout
-- the model; else the pools add up to more than the limit (docs/pools.md §1).
local left = tonumber(ARGV[2])
local out = {1}
local function clamp(f, line)
  local v = tonumber(redis.call('HGET', KEYS[1], f) or '0')
  local keepv = math.max(0, math.min(v, left))
  left = left - keepv
  if keepv == v then return end
  if keepv == 0 then redis.call('HDEL', KEYS[1], f) else redis.call('HSET', KEYS[1], f, string.format('%d', keepv)) end
  if v > keepv then
    out[#out + 1] = line
    out[#out + 1] = string.format('%d', v - keepv)
  end
end
clamp('sbuf', '')
for i = first, #ARGV, 5 do clamp('b:' .. ARGV[i], ARGV[i]) end
return out
