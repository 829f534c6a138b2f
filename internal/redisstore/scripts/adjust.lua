-- adjust.lua: correct a period's balance by deltas found by reconciliation,
-- once per call however often the call is sent (known gap G8: go-redis sends
-- a command again after a read timeout, and a correction applied twice
-- would make a drift of its own), only on the balance it was measured on,
-- and never taking a reservation a live session still holds (issue 22 §1).
-- KEYS[1] qc:{r}:b:<periodMs>   KEYS[2] qc:{r}:adj:<token>, the call's mark
-- KEYS[3] qc:{r}:lock:<name>, the lock the correction is made under
-- KEYS[4..] qc:{r}:s:<id> of the sessions the caller found USING here with
--         no USING ledger row (quota.Adjustment.Unrecorded)
-- ARGV[1] charged delta   ARGV[2] reserved delta
-- ARGV[3] how long the mark is kept, ms (longer than any resend)
-- ARGV[4] the caller's lock token ("" = not fenced)
-- ARGV[5] charged and ARGV[6] reserved as the caller read them when it
--         measured the deltas ("" = not checked)
-- ARGV[7] periodMs of KEYS[1]
-- Returns 1 when applied, 2 when this call (its token) was applied before
-- (a resend: nothing changed), 0 when the balance does not exist (it will be
-- seeded from the ledger, which needs no correction), 3 when KEYS[3] does
-- not hold ARGV[4]: the caller's lock expired and may be another
-- reconciler's now (issue 11 §3.4, fencing), so its drift, measured before,
-- is not written; 4 when the balance is not ARGV[5]/ARGV[6] any more (it
-- moved since it was measured: a give-back, an apply, or this correction
-- sent again under another token after a lost answer): nothing changed;
-- 5 when, once the live sessions' reservations are kept, nothing is left to
-- correct: nothing changed.
-- Live sessions (issue 22 §1): a session of KEYS[4..] that is USING in this
-- period and counted by this balance (no epoch, or the balance's 'ep')
-- holds its grant in 'reserved' for its own give-back (finish, cancel or
-- sweep, each once per session); the ledger does not count it, so the
-- caller's reserved delta would take it too. Its grant is added back to
-- the delta: reserved becomes the ledger's plus what live unrecorded
-- sessions hold, and each of them is given back once, by its own script.
-- An error reply QCNEGATIVE (nothing changed) when the correction would
-- leave charged or reserved below zero.
-- include session_record.lib
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[4] then
  return 3
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local b = redis.call('HMGET', KEYS[1], 'charged', 'reserved', 'ep')
local c, r = b[1] or '0', b[2] or '0'
if ARGV[5] ~= '' and (c ~= ARGV[5] or r ~= ARGV[6]) then
  return 4
end
local dc, dr = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 4, #KEYS do
  local s = sessionGet(KEYS[i], {'status', 'period', 'bep', 'granted'})
  if s[1] == 'USING' and s[2] == ARGV[7] and (not s[3] or s[3] == b[3]) then
    dr = dr + tonumber(s[4])
  end
end
if dc == 0 and dr == 0 then
  return 5
end
if tonumber(c) + dc < 0 or tonumber(r) + dr < 0 then
  return redis.error_reply('QCNEGATIVE adjust.lua: charged ' .. c .. ' + ' .. string.format('%d', dc) .. ', reserved ' ..
    r .. ' + ' .. string.format('%d', dr) .. ' would go below zero')
end
redis.call('HINCRBY', KEYS[1], 'charged', string.format('%d', dc))
redis.call('HINCRBY', KEYS[1], 'reserved', string.format('%d', dr))
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
return 1
