-- seed.lua: write a period's balance (and the resource's limit) if absent,
-- and bring back open sessions the store lost.
-- KEYS[1] qc:{r}:limit   KEYS[2] qc:{r}:b:<periodMs>   KEYS[3] qc:{r}:leases
-- KEYS[4] qc:{r}:lock:<name>, the seed lock the call is made under
-- KEYS[5..] qc:{r}:s:<sessionId> of each open session of ARGV[8..], in order
-- ARGV[1] limit   ARGV[2] charged   ARGV[3] reserved   ARGV[4] expire-at ms (0 = never)
-- ARGV[5] "1" = write the balance (first chunk), "0" = sessions only (later chunks),
--         "c" = catch-up after a rebuild: open rows read again after it
--         (ARGV[8] the rebuild's epoch, or "" for the balance's current one;
--         returns 0 and changes nothing when the balance has no epoch or
--         another one): each USING row the balance does not count is
--         counted, once (a missing session is restored and counted)
-- ARGV[6] lease ms for restored USING sessions; retention ms for LEAKED ones
-- ARGV[7] the caller's lock token ("" = not fenced): when KEYS[4] does not
--         hold it the call writes nothing and returns 2 (issue 11 §3.4: a
--         seeder whose lock expired while it read the ledger, and which
--         another instance may have taken, must not write what it read)
-- ARGV[8] the balance's epoch: a token of this rebuild ("" in the sessions-only
--         calls of RestoreSessions and RestoreLeaked, which rebuild no balance)
-- ARGV[9] periodMs of KEYS[2]
-- ARGV[10..] sessions, 16 values each:
--           sessionId, amount, minAmount, clientId, granted, startMs, periodMs,
--           status, endMs, pools, line, dd, ds, db, dg, gl
--           status USING: an open session, restored with a fresh lease (endMs
--           "0"); LEAKED: a swept one restored for a late finish to true it
--           up (finish.lua), endMs when it was swept; it gets no lease and
--           expires at ARGV[6] ms after endMs (the finished retention)
--           pools "1": a pools' session (apply.lua); line and the split
--           its grant drew (dedicated, shared, buffer or base, grant, grant
--           list "id=n;id=n") come back with it, so that its finish refunds
--           the pools it came from; "0": the six fields are ignored
-- Returns 1 when this call wrote the balance (or, for a later chunk, ran),
-- 0 when the balance was already there: a concurrent seeder won, its values
-- and its restored sessions stand, and nothing is written; 2 when fenced.
-- A restored session keeps its grant; its reservation is already in the
-- rebuilt totals (the ledger row is USING), so no balance is touched for it.
-- It has no 'remaining' (the ledger does not keep the first answer's): a
-- replayed apply of it answers the current remaining (apply.lua).
-- A session key still present is left alone, except for its epoch.
-- Epochs (issue 11 §3.1): the balance keeps the epoch of the rebuild that
-- wrote it ('ep'), a session the epoch of the balance that counts its
-- reservation ('bep', set by apply.lua). A USING session of this period
-- given here (its ledger row is open: the rebuild counted it) gets this
-- epoch, restored or still present; a session left out keeps its old one,
-- so a give-back (cancel.lua) of a reservation the rebuilt balance never
-- counted (no ledger row) takes nothing from it.
-- include session_record.lib
if ARGV[7] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[7] then
  return 2
end
local E = ARGV[8]
if ARGV[5] == 'c' then
  -- ARGV[8] "" = whatever rebuild the balance is now
  local ep = redis.call('HGET', KEYS[2], 'ep')
  if not ep or (E ~= '' and ep ~= E) then
    return 0 -- no rebuild's balance, or rebuilt again since
  end
  E = ep
end
if ARGV[5] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'NX')
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return 0
  end
  redis.call('HSET', KEYS[2], 'charged', ARGV[2], 'reserved', ARGV[3])
  if E ~= '' then
    redis.call('HSET', KEYS[2], 'ep', E)
  end
  if tonumber(ARGV[4]) > 0 then
    redis.call('PEXPIREAT', KEYS[2], ARGV[4])
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = now + tonumber(ARGV[6])
local k = 4
local function pools(sk, i)
  if ARGV[i + 9] == '1' then
    redis.call('HSET', sk, 'line', ARGV[i + 10], 'dd', ARGV[i + 11], 'ds', ARGV[i + 12], 'db', ARGV[i + 13],
      'dg', ARGV[i + 14], 'gl', ARGV[i + 15])
  end
end
local function epoch(sk, i)
  if E ~= '' and ARGV[i + 6] == ARGV[9] then
    redis.call('HSET', sk, 'bep', E)
  end
end
local function add(field, n)
  if n ~= 0 then
    redis.call('HINCRBY', KEYS[2], field, string.format('%d', n))
  end
end
-- A session still present whose ledger row was open when the rebuild read
-- it: once per rebuild (its epoch then marks it), the balance takes what
-- Redis knows beyond that row. USING: counted as the row was (reserved).
-- FINISHED, LEAKED or CANCELLED: the finish, sweep or give-back ran in
-- Redis and its ledger write had not landed (issue 11, G7: the rebuilt
-- balance kept the grant reserved, a "ghost"), so the grant leaves
-- 'reserved' and what it settled to enters 'charged'; the row follows
-- (its writer, or reconciliation from this session). In the catch-up
-- ('c'), a row that opened after the read: a USING session the balance
-- does not count (another epoch) is counted now, once.
local function ahead(sk, i)
  if E == '' or ARGV[i + 6] ~= ARGV[9] then
    return
  end
  local x = sessionGet(sk, {'status', 'granted', 'actual', 'bep'})
  if x[4] == E then
    return
  end
  if ARGV[5] == 'c' then
    if x[1] == 'USING' and x[4] then
      add('reserved', tonumber(x[2]))
      redis.call('HSET', sk, 'bep', E)
    end
    return
  end
  if x[1] ~= 'USING' and ARGV[i + 9] == '1' then
    return -- a pools' session: its counters are rebuilt by pool_seed.lua
  end
  local g = tonumber(x[2])
  if x[1] == 'FINISHED' then
    add('reserved', -g); add('charged', tonumber(x[3]))
  elseif x[1] == 'LEAKED' then
    add('reserved', -g); add('charged', g)
  elseif x[1] == 'CANCELLED' then
    add('reserved', -g)
  end
  redis.call('HSET', sk, 'bep', E)
end
for i = 10, #ARGV, 16 do
  local id = ARGV[i]
  k = k + 1
  local sk = KEYS[k]
  if redis.call('EXISTS', sk) == 1 then
    if ARGV[i + 7] ~= 'LEAKED' then
      ahead(sk, i)
    end
  elseif ARGV[5] == 'c' and ARGV[i + 6] ~= ARGV[9] then
    -- catch-up: another period's row is not this balance's business
  else
    if ARGV[i + 7] == 'LEAKED' then
      local until_ms = tonumber(ARGV[i + 8]) + tonumber(ARGV[6])
      if until_ms > now then
        redis.call('HSET', sk, 'amount', ARGV[i + 1], 'min', ARGV[i + 2], 'client', ARGV[i + 3],
          'granted', ARGV[i + 4], 'lease', ARGV[i + 8], 'start', ARGV[i + 5],
          'period', ARGV[i + 6], 'status', 'LEAKED', 'end', ARGV[i + 8])
        pools(sk, i)
        redis.call('PEXPIREAT', sk, string.format('%d', until_ms))
      end
    else
      redis.call('HSET', sk, 'amount', ARGV[i + 1], 'min', ARGV[i + 2], 'client', ARGV[i + 3],
        'granted', ARGV[i + 4], 'lease', string.format('%d', lease),
        'start', ARGV[i + 5], 'period', ARGV[i + 6], 'status', 'USING')
      pools(sk, i)
      epoch(sk, i)
      if ARGV[5] == 'c' then
        add('reserved', tonumber(ARGV[i + 4]))
      end
      redis.call('ZADD', KEYS[3], lease, id)
    end
  end
end
return 1
