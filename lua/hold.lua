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
local LONGEST_INTERVAL_MS = 3600000 -- [nppa] probe_interval_seconds at most
local LONGEST_KEEP_MS = 2592000000  -- a hold nobody touches is kept a month at most
guard_open('hold', KEYS[3], KEYS[4], {})
local what = ARGV[1]
if what ~= 'hold' and what ~= 'probe' and what ~= 'turn' and what ~= 'kick' and what ~= 'lift'
    and what ~= 'read' then
  return redis.error_reply('ERR hold: unknown request ' .. string.sub(what, 1, 40))
end
local interval = arg_number(2, 'interval_ms', 0, LONGEST_INTERVAL_MS)
local keep = arg_number(6, 'keep_ms', 1, LONGEST_KEEP_MS)
local function is_reply(r)
  if type(r) ~= 'table' or #r ~= 8 then return false end
  for k = 1, 5 do
    if not is_whole(r[k]) then return false end
  end
  return type(r[6]) == 'string' and type(r[7]) == 'string' and type(r[8]) == 'string'
end
if what ~= 'read' then
  local done = receipt_of(KEYS[2], '', is_reply)
  if done then return done end
end
expect(KEYS[1], 'hash')
local now
if ARGV[7] == '' then
  now = clock_ms()
else
  now = arg_number(7, 'now_ms', 0, 2 ^ 53)
end

-- The hold's times were written as now (since) or a probe interval from now (probe_at): a
-- time further ahead (a clock, a hand) is refused, so that it cannot keep every sender held
-- with no probe ever due.  A refused start reads as now, a refused probe time as due.
local refused = {}
local slack = CLOCK_SLACK_MS
local h = redis.call('HMGET', KEYS[1], 'since', 'probe_at', 'probes')
local since = field_number(refused, KEYS[1], 'since', h[1], 0, now + slack)
if since == nil and h[1] then since = now end -- refused: held from now at least
local probe_at = field_number(refused, KEYS[1], 'probe_at', h[2], 0,
                              now + LONGEST_INTERVAL_MS + slack) or 0
local probes = field_number(refused, KEYS[1], 'probes', h[3], 0, 2 ^ 53) or 0
local held = redis.call('EXISTS', KEYS[1]) == 1

local function reply(state)
  local text = redis.call('HMGET', KEYS[1], 'cause', 'check', 'game')
  return {state, now, since or 0, probe_at, probes,
          text[1] or '', text[2] or '', text[3] or ''}
end

local function answer(r)
  keep_receipt(KEYS[2], '', r, ARGV[8])
  return r
end

if what == 'read' then
  if held then return reply(1) end
  return reply(0)
end
drop_refused(refused)
if held and #refused > 0 then redis.call('HSET', KEYS[1], 'since', since or now) end
if what == 'lift' then
  redis.call('DEL', KEYS[1])
  if held then return answer({2, now, 0, 0, 0, '', '', ''}) end
  return answer({0, now, 0, 0, 0, '', '', ''})
end
if what == 'hold' then
  local state = 1
  if not held then
    state = 2
    since, probe_at, probes = now, now + interval, 0
    redis.call('HSET', KEYS[1], 'since', since, 'probe_at', probe_at, 'probes', probes)
  end
  redis.call('HSET', KEYS[1], 'cause', ARGV[3], 'check', ARGV[4], 'game', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], keep)
  held = true
  return answer(reply(state))
end
if not held then return reply(0) end
if what == 'kick' then
  probe_at = now
  redis.call('HSET', KEYS[1], 'probe_at', probe_at)
  return answer(reply(1))
end
if what == 'probe' or what == 'turn' then
  if what == 'probe' and now < probe_at then return reply(1) end
  probe_at, probes = now + interval, probes + 1
  redis.call('HSET', KEYS[1], 'probe_at', probe_at, 'probes', probes)
  redis.call('PEXPIRE', KEYS[1], keep)
  return answer(reply(2))
end
return reply(1)
