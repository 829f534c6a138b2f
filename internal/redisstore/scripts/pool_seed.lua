-- pool_seed.lua: write one period's pool counters, rebuilt from the ledger, unless already there.
-- KEYS[1] qc:{r}:b:<periodMs> (must exist: seed.lua first)
-- KEYS[1 + i] qc:{r}:s:<sessionId> of the i-th open session of ARGV (i = 1..)
-- ARGV[1] n, the number of settled lines; then 5 values per settled line:
--   name, dedicated, shared, buffer, grant (what its finished sessions stay
--   charged to); then 5 values per open session (USING or LEAKED in the
--   ledger): line, dedicated, shared, buffer, grant (its whole draw)
-- An open session whose Redis session is FINISHED or CANCELLED now settled
-- after the ledger was read (its finish or cancel ran while the counters were
-- not seeded, so it did not touch them): what Redis settled it to (dd, ds,
-- db, dg; all 0 when cancelled) counts instead of the ledger's draw, so the
-- refund is not lost. Once 'ps' is written, finish.lua and cancel.lua settle
-- the counters themselves.
-- Returns 1 when written, 0 when the counters were there (or the balance is missing: -1).
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'ps') == '1' then return 0 end
local by, order = {}, {}
local function add(l, d, s, b, g)
  local t = by[l]
  if not t then
    t = {0, 0, 0, 0}
    by[l] = t
    order[#order + 1] = l
  end
  t[1], t[2], t[3], t[4] = t[1] + d, t[2] + s, t[3] + b, t[4] + g
end
local n = tonumber(ARGV[1])
for i = 2, 1 + 5 * n, 5 do
  add(ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]))
end
local k = 1
for i = 2 + 5 * n, #ARGV, 5 do
  k = k + 1
  local v = {ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]}
  local s = redis.call('HMGET', KEYS[k], 'status', 'line', 'dd', 'ds', 'db', 'dg')
  if (s[1] == 'FINISHED' or s[1] == 'CANCELLED') and (s[2] or '') == ARGV[i] and s[3] then
    v = {s[3], s[4], s[5], s[6]}
    if ARGV[i] == '' then v[3] = '0' end -- without lines 'db' is the limit's part: no counter
  end
  add(ARGV[i], tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4]))
end
local su, gsum = 0, 0
for _, l in ipairs(order) do
  local t = by[l]
  redis.call('HSET', KEYS[1], 'ud:' .. l, string.format('%d', t[1]), 'us:' .. l, string.format('%d', t[2]),
    'ub:' .. l, string.format('%d', t[3]), 'ug:' .. l, string.format('%d', t[4]))
  su = su + t[2]
  gsum = gsum + t[4]
end
-- 'ht' keeps the hash in the hashtable encoding, as pool_layout.lua does for qc:{r}:pl.
redis.call('HSET', KEYS[1], 'su', string.format('%d', su), 'gsum', string.format('%d', gsum), 'ps', '1',
  'ht', 'keeps this hash a hashtable, not a listpack: see pool_layout.lua and docs/pools.md (section 6)')
return 1
