#!lua flags=allow-oom
-- hold: sending held for one app id, in every reporter that uses the key. An answer only the
-- operator can fix (a wrong key, an IP not registered, an expired test code) starts the hold;
-- while it lasts nobody claims, and one caller per probe interval gets the turn to send one
-- probe request; the first probe that passes lifts it for everyone. Times from Redis TIME, so
-- every reporter's clock agrees.
-- Sent again after a lost reply (its receipt is there): answers what it answered (so the
-- caller that started the hold, or took the turn to probe, still knows it), changing
-- nothing.  A hold key of another type is set aside in the hold's own quarantine
-- (lua/_guard.lua: its hash tag is not a shard's) and counts as no hold.
-- allow-oom: it rewrites a few fields of one small hash; refusing it when memory is full
-- would keep every reporter sending into the same refusal.
--
-- KEYS[1]  hold       hash   cause, check, game, since (ms), probe_at (ms), probes
-- KEYS[2]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- KEYS[3]  quarantine list   the hold's records set aside, newest first
-- KEYS[4]  stats      hash   the hold's counters (only of what is set aside)
-- ARGV[1]  what: 'hold' (start it, or note the latest cause), 'probe' (take the turn to
--          probe if it has come), 'turn' (take it now: this caller's key just changed),
--          'kick' (the next probe is due now, whoever takes it), 'lift' (end it), 'read'
-- ARGV[2]  interval_ms: probe interval in ms ('hold', 'probe', 'turn')
-- ARGV[3]  cause: cause, e.g. "nppa 1011" ('hold')
-- ARGV[4]  check: what the operator should check ('hold')
-- ARGV[5]  game: the game whose request met it ('hold'): the probe goes with its bizId
-- ARGV[6]  keep_ms: ms a hold nobody touches is kept, then forgotten
-- ARGV[7]  now_ms: the time in ms, or '' for Redis TIME (tests give their own)
-- ARGV[8]  receipt_ms: receipt lifetime in ms
-- returns  {state, now (ms), since (ms), probe_at (ms), probes, cause, check, game}; state
--          0: not held; 1: held; 2: held, and this call started it ('hold') or has the turn
--          to probe ('probe', 'turn'); for 'lift', 2 if it ended a hold, else 0
-- include: _guard
guard_open('hold', KEYS[3], KEYS[4], {})
local what, interval = ARGV[1], tonumber(ARGV[2]) or 0
if what ~= 'read' then
  local done = receipt_of(KEYS[2], '')
  if done then return done end
end
expect(KEYS[1], 'hash')
local now
if ARGV[7] == '' then
  now = clock_ms()
else
  now = tonumber(ARGV[7])
end

local function reply(state)
  local h = redis.call('HMGET', KEYS[1], 'since', 'probe_at', 'probes', 'cause', 'check', 'game')
  return {state, now, tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0,
          h[4] or '', h[5] or '', h[6] or ''}
end

local function answer(r)
  keep_receipt(KEYS[2], '', r, ARGV[8])
  return r
end

local held = redis.call('EXISTS', KEYS[1]) == 1
if what == 'lift' then
  redis.call('DEL', KEYS[1])
  if held then return answer({2, now, 0, 0, 0, '', '', ''}) end
  return answer({0, now, 0, 0, 0, '', '', ''})
end
if what == 'read' then
  if held then return reply(1) end
  return reply(0)
end
if what == 'hold' then
  local state = 1
  if not held then
    state = 2
    redis.call('HSET', KEYS[1], 'since', now, 'probe_at', now + interval, 'probes', 0)
  end
  redis.call('HSET', KEYS[1], 'cause', ARGV[3], 'check', ARGV[4], 'game', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
  return answer(reply(state))
end
if not held then return reply(0) end
if what == 'kick' then
  redis.call('HSET', KEYS[1], 'probe_at', now)
  return answer(reply(1))
end
if what == 'probe' or what == 'turn' then
  local h = redis.call('HMGET', KEYS[1], 'probe_at', 'probes')
  if what == 'probe' and now < (tonumber(h[1]) or 0) then return reply(1) end
  redis.call('HSET', KEYS[1], 'probe_at', now + interval, 'probes', (tonumber(h[2]) or 0) + 1)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
  return answer(reply(2))
end
return redis.error_reply('hold: unknown request ' .. what)
