-- balance.lua: read one period's balance; changes nothing.
-- KEYS[1] qc:{r}:limit   KEYS[2] qc:{r}:b:<periodMs>   KEYS[3] qc:{r}:leases
-- KEYS[4] qc:{r}:gr (the resource's temporary grants; optional)
-- Returns {exists (0|1), limit, charged, reserved, activeSessions, held,
-- room}; limit, charged and reserved as the decimal strings Redis holds, so
-- that sums past 2^53 (overage) stay exact (Lua numbers are doubles); held
-- and room as grantroom.lib answers them ('' for a plain resource or
-- without KEYS[4]).
-- include grantroom.lib
local limit = redis.call('GET', KEYS[1])
local b = redis.call('HMGET', KEYS[2], 'charged', 'reserved')
local active = redis.call('ZCARD', KEYS[3])
if not limit or not b[1] or not b[2] then
  return {0, limit or '0', '0', '0', active, '', ''}
end
local held, room = '', ''
if KEYS[4] then
  local t = redis.call('TIME')
  local h, r = grantRoom(KEYS[2], KEYS[4], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  if h then held, room = h, r end
end
return {1, limit, b[1], b[2], active, held, room}
