-- sweep.lua: move USING sessions whose lease expired to LEAKED, and report
-- swept sessions whose ledger row is not yet acknowledged as LEAKED.
-- The candidates come from expired.lua; every one is checked again here.
-- KEYS[1] qc:{r}:leases   KEYS[2] qc:{r}:leaked (set of swept ids whose ledger
--         row is not yet acknowledged as LEAKED)
-- KEYS[2 + i]      qc:{r}:s:<id> of the i-th expired candidate (i = 1..n)
-- KEYS[2 + n + j]  qc:{r}:s:<id> of the j-th leaked candidate
-- KEYS[...]        qc:{r}:b:<periodMs> of the candidates' periods (ARGV names
--                  which)
-- ARGV[1] retention ms of a swept session   ARGV[2] n
-- ARGV[3 .. 2 + 3n] each expired candidate: sessionId, periodMs (as the caller
--         read it; "" = no session), index in KEYS of that period's balance
--         (0 = none)
-- ARGV[3 + 3n ..] the leaked candidates' ids
-- Returns a flat list of 6-tuples {sessionId, periodMs, granted, endMs, fresh,
-- clientId}: fresh 1 = swept now, 0 = swept earlier and still unacknowledged.
-- A lease is expired when lease <= now (Redis TIME). A heartbeat and a sweep
-- are both single scripts, so a session renewed in time is never swept. A
-- candidate whose session changed period since the caller read it is left
-- in the lease index for the next sweep.
-- An error reply QCNEGATIVE (nothing changed) when the sweeps would leave a
-- balance's reserved below zero.
-- include session_record.lib
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[2])
local out = {}
local seen = {}
-- First every candidate is read and judged, nothing written: the sweeps
-- of this call, and what each takes from its balance's 'reserved'.
local plan = {}
local take = {} -- balance key -> reserved the sweeps below take from it
for i = 1, n do
  local a = 3 + 3 * (i - 1)
  local id, per, bidx = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) <= now then
    local sk = KEYS[2 + i]
    local s = sessionGet(sk, {'status', 'granted', 'period', 'lease', 'client', 'bep'})
    if s[1] ~= 'USING' or s[3] == per then
      local p = {id = id, sk = sk, s = s, sweep = s[1] == 'USING' and tonumber(s[4]) <= now}
      if p.sweep then
        p.bkey = KEYS[bidx]
        p.exists = redis.call('EXISTS', p.bkey) == 1
        if p.exists then
          -- The grant leaves 'reserved' only if this balance counts it (its
          -- epoch is the session's, seed.lua): a balance rebuilt since from a
          -- ledger without the session's row gets only the charge.
          p.ep = redis.call('HGET', p.bkey, 'ep')
          p.counted = not s[6] or s[6] == p.ep
          if p.counted then
            take[p.bkey] = (take[p.bkey] or 0) + tonumber(s[2])
          end
        end
      end
      plan[#plan + 1] = p
    end
  end
end
-- Never below zero (issue 22 §1): a balance that no longer holds these
-- reservations gave them back already. The whole call is refused, before
-- any write; reconciliation corrects the balance from the ledger.
for bkey, g in pairs(take) do
  local r = tonumber(redis.call('HGET', bkey, 'reserved') or '0')
  if r - g < 0 then
    return redis.error_reply('QCNEGATIVE sweep.lua: reserved ' .. string.format('%d', r) .. ' - ' ..
      string.format('%d', g) .. ' of ' .. bkey .. ' would go below zero')
  end
end
for _, p in ipairs(plan) do
  local id, sk, s = p.id, p.sk, p.s
  redis.call('ZREM', KEYS[1], id)
  if p.sweep then
    if p.exists then
      if p.counted then
        redis.call('HINCRBY', p.bkey, 'reserved', string.format('%d', -tonumber(s[2])))
      elseif p.ep then
        redis.call('HSET', sk, 'bep', p.ep)
      end
      redis.call('HINCRBY', p.bkey, 'charged', s[2])
    end
    redis.call('HSET', sk, 'status', 'LEAKED', 'end', string.format('%d', now))
    redis.call('PEXPIRE', sk, ARGV[1])
    redis.call('SADD', KEYS[2], id)
    seen[id] = true
    for _, v in ipairs({id, s[3], s[2], string.format('%d', now), '1', s[5] or ''}) do out[#out + 1] = v end
  end
end
local j = 0
for a = 3 + 3 * n, #ARGV do
  j = j + 1
  local id = ARGV[a]
  if not seen[id] and redis.call('SISMEMBER', KEYS[2], id) == 1 then
    local s = sessionGet(KEYS[2 + n + j], {'status', 'granted', 'period', 'end', 'client'})
    if not s[1] then
      redis.call('SREM', KEYS[2], id) -- expired: nothing left to report
    else
      for _, v in ipairs({id, s[3], s[2], s[4] or '0', '0', s[5] or ''}) do out[#out + 1] = v end
    end
  end
end
return out
