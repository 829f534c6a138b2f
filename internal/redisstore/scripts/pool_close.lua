-- pool_close.lua: a line's closing mark, cl:<line> in the layout, which a
-- DELETE of the line sets before it counts the line's open sessions. While
-- the mark holds, apply.lua opens no new session on the line (answer 9,
-- pools.ErrLineClosing). The mark is the DELETE's lease: its value is a
-- deadline (ms, Redis TIME) the DELETE sets as now + the bound
-- (QC_LINE_CLOSE_BOUND), and a mark past it is ignored (apply.lua,
-- pools.LineState.Closing): a DELETE that died after the mark (the
-- instance killed, MySQL or Redis failing before it took the mark off)
-- leaves the line usable again once the bound passes. A DELETE that runs
-- longer than its bound must not answer 200, so it asks here, after its
-- layout without the line is written, whether its own mark (the deadline
-- it set: the token) still holds ("?"), and the DELETE of the last line
-- drops the layout here only if it does ("-"). Once its transaction
-- committed the mark becomes the tombstone "d", which never expires ("e"
-- with ARGV[4] "d"): the mark is not one of the line's one-letter fields,
-- so pool_layout.lua leaves it when a layout without the line is written,
-- and a layout written from a read older than the commit that brings the
-- line back into Redis does not reopen it. A PUT of the line, and a DELETE
-- refused or failed, take the mark off ("e" with ARGV[4] "0").
-- KEYS[1] qc:{r}:pl
-- ARGV[1] line
-- ARGV[2] "1" close: ARGV[3] the bound (ms); returns the deadline set, or 0
--         when the line is not in the layout (nothing written).
--         "?" held: ARGV[3] the token; 1 when the mark is the token and its
--         deadline has not passed, else 0.
--         "-" drop: as "?", and when it holds the layout is deleted (the
--         last line's DELETE; pool_layout.lua's "-"); 1 dropped, 0 not.
--         "e" end: ARGV[3] the token ("" = whatever mark is set), ARGV[4]
--         "0" take the mark off, "d" make it the tombstone; 1 done, 0 the
--         mark was not the token (nothing written).
local key, f = KEYS[1], 'cl:' .. ARGV[1]
local op = ARGV[2]
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if op == '1' then
  if redis.call('HEXISTS', key, 't:' .. ARGV[1]) == 0 then
    return 0
  end
  local deadline = now() + tonumber(ARGV[3])
  redis.call('HSET', key, f, string.format('%d', deadline))
  return deadline
end
local cur = redis.call('HGET', key, f)
if op == 'e' then
  if ARGV[3] ~= '' and cur ~= ARGV[3] then
    return 0
  end
  if ARGV[4] == 'd' then
    if cur then redis.call('HSET', key, f, 'd') end
  else
    redis.call('HDEL', key, f)
  end
  return 1
end
-- "?" and "-": the token's mark, its deadline not passed.
if cur ~= ARGV[3] or not (now() < tonumber(ARGV[3])) then
  return 0
end
if op == '-' then
  redis.call('DEL', key)
end
return 1
