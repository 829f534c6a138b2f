-- pool_move.lua: one move of the controller or an operator, bounded as in
-- internal/pools (Model.Release, Return, Reclaim, GiveBack).
-- KEYS[1] qc:{r}:pl   KEYS[2] qc:{r}:b:<periodMs> of the current period
-- ARGV[1] op: release | return | reclaim | giveback | watermark
--   release  ARGV[2] line ("" = the shared pool)  ARGV[3] amount: 1 … the free buffer, else nothing
--   return   ARGV[2] line ("" = shared)  ARGV[3] at most this much, never what is held now
--   reclaim  ARGV[2] from  ARGV[3] to  ARGV[4] at most this much of from's unused dedicated part
--   giveback ARGV[2] from  ARGV[3] to  ARGV[4] at most this much, never what `to` holds of it
--   watermark ARGV[2] line  ARGV[3] basis points
--   mode     ARGV[2] line  ARGV[3] PREDICTIVE | REACTIVE (the controller's choice, m:L)
-- Returns {moved, free buffer after}; moved -1 = unknown line or op.
local function num(v) return tonumber(v or '0') or 0 end
local function fmt(n) return string.format('%d', n) end
local function exists(line) return redis.call('HEXISTS', KEYS[1], 't:' .. line) == 1 end
local function free()
  local all = redis.call('HGETALL', KEYS[1])
  local f = 0
  local h = {}
  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
  f = num(h.buffer) - num(h.sbuf)
  for k, v in pairs(h) do
    if string.sub(k, 1, 2) == 'b:' then f = f - num(v) end
  end
  return f
end
local function own(line)
  local p = redis.call('HMGET', KEYS[1], 'd:' .. line, 'l:' .. line, 'r:' .. line)
  return num(p[1]) - num(p[2]) + num(p[3]) - num(redis.call('HGET', KEYS[2], 'ud:' .. line))
end
local op = ARGV[1]
local moved = 0
if op == 'release' then
  local line, amount = ARGV[2], tonumber(ARGV[3])
  if line ~= '' and not exists(line) then return {-1, free()} end
  if amount < 1 or amount > free() then return {0, free()} end
  if line == '' then redis.call('HINCRBY', KEYS[1], 'sbuf', fmt(amount))
  else redis.call('HINCRBY', KEYS[1], 'b:' .. line, fmt(amount)) end
  moved = amount
elseif op == 'return' then
  local line, amount = ARGV[2], tonumber(ARGV[3])
  if line == '' then
    local p = redis.call('HMGET', KEYS[1], 'sbuf', 'shared')
    moved = math.max(0, math.min(amount, num(p[1]), num(p[2]) + num(p[1]) - num(redis.call('HGET', KEYS[2], 'su'))))
    if moved > 0 then redis.call('HINCRBY', KEYS[1], 'sbuf', fmt(-moved)) end
  else
    if not exists(line) then return {-1, free()} end
    local b = num(redis.call('HGET', KEYS[1], 'b:' .. line))
    moved = math.max(0, math.min(amount, b, b - num(redis.call('HGET', KEYS[2], 'ub:' .. line))))
    if moved > 0 then redis.call('HINCRBY', KEYS[1], 'b:' .. line, fmt(-moved)) end
  end
elseif op == 'reclaim' or op == 'giveback' then
  local from, to, amount = ARGV[2], ARGV[3], tonumber(ARGV[4])
  if not exists(from) or not exists(to) or from == to then return {-1, free()} end
  if op == 'reclaim' then
    moved = math.max(0, math.min(amount, own(from)))
  else
    moved = math.max(0, math.min(amount, num(redis.call('HGET', KEYS[1], 'l:' .. from)),
      num(redis.call('HGET', KEYS[1], 'r:' .. to)), own(to)))
    moved = -moved
  end
  if moved ~= 0 then
    redis.call('HINCRBY', KEYS[1], 'l:' .. from, fmt(moved))
    redis.call('HINCRBY', KEYS[1], 'r:' .. to, fmt(moved))
  end
  moved = math.abs(moved)
elseif op == 'watermark' then
  if not exists(ARGV[2]) then return {-1, free()} end
  redis.call('HSET', KEYS[1], 'w:' .. ARGV[2], ARGV[3])
  moved = tonumber(ARGV[3])
elseif op == 'mode' then
  if not exists(ARGV[2]) then return {-1, free()} end
  redis.call('HSET', KEYS[1], 'm:' .. ARGV[2], ARGV[3])
  moved = 1
else
  return {-1, free()}
end
return {moved, free()}
