#!lua flags=allow-oom
-- hold: sending held for one scope (an app id, one game, the reporters using one key, one
-- reporter), in every reporter that uses the key. An answer only the operator can fix (a
-- wrong key, an IP not registered, an unknown bizId) starts the hold; while it lasts nobody
-- sends in its scope, and one caller per probe interval gets the turn to send one probe
-- request (the first soon after it starts); the first probe that passes lifts it for
-- everyone. Times from Redis TIME, so
-- every reporter's clock agrees.
-- The holds of one sink share a hash tag and an index of those held now (status and every
-- reporter read it). A lifted hold keeps, for `window` ms, the batches whose requests met it
-- (their "suspects"): one of them that meets the same cause again after the lift drew it
-- itself (the scope's own probe passed in between), so it is answered 3 (poison: the caller
-- dead-letters that batch) and nothing is held.
-- Sent again after a lost reply (its receipt is there): answers what it answered (so the
-- caller that started the hold, or took the turn to probe, still knows it), changing
-- nothing.  A hold key of another type is set aside in the hold's own quarantine
-- (lua/_guard.lua: its hash tag is not a shard's) and counts as no hold.
-- allow-oom: it rewrites a few fields of one small hash (at most MOST_SUSPECTS batch ids)
-- and one member of a small index; refusing it when memory is full would keep every
-- reporter sending into the same refusal.
--
-- KEYS[1]  hold       hash   cause, check, game, since (ms), probe_at (ms), probes, lifted
--                            (ms, when a probe lifted it: no longer held), s:<batch id> (the
--                            cause a batch's request met while it was held)
-- KEYS[2]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- KEYS[3]  quarantine list   the hold's records set aside, newest first
-- KEYS[4]  stats      hash   the hold's counters (only of what is set aside)
-- KEYS[5]  holds      zset   scope -> since (ms): the scopes held now, in this hash tag
-- ARGV[1]  what: 'hold' (start it, or note the latest cause), 'probe' (take the turn to
--          probe if it has come), 'turn' (take it now: this caller's key just changed),
--          'kick' (the next probe is due now, whoever takes it), 'lift' (end it), 'read'
--          (and drop the scope from the index if it is not held)
-- ARGV[2]  interval_ms: probe interval in ms ('hold', 'probe', 'turn')
-- ARGV[3]  cause: cause, e.g. "nppa 1011" ('hold')
-- ARGV[4]  check: what the operator should check ('hold')
-- ARGV[5]  game: the game whose request met it ('hold'): the probe goes with its bizId
-- ARGV[6]  keep_ms: ms a hold nobody touches is kept, then forgotten
-- ARGV[7]  now_ms: the time in ms, or '' for Redis TIME (tests give their own)
-- ARGV[8]  scope: this hold's name in the index
-- ARGV[9]  batch: the batch whose request met it ('hold'; '' for none)
-- ARGV[10] window_ms: how long a lifted hold keeps its suspects ('lift', 'hold')
-- ARGV[11] first_ms: the first probe is due this long after the hold starts ('hold'; at
--          most interval_ms): soon, so that a batch's own refusal is told apart quickly
-- ARGV[12] receipt_ms: receipt lifetime in ms
-- returns  {state, now (ms), since (ms), probe_at (ms), probes, cause, check, game}; state
--          0: not held; 1: held; 2: held, and this call started it ('hold') or has the turn
--          to probe ('probe', 'turn'); for 'lift', 2 if it ended a hold, else 0; 3 ('hold'):
--          not held: the batch met the cause again after a probe lifted the hold it drew
-- include: _guard
local LONGEST_INTERVAL_MS = 3600000 -- [nppa] probe_interval_seconds at most
local LONGEST_KEEP_MS = 2592000000  -- a hold nobody touches is kept a month at most
local MOST_SUSPECTS = 64            -- batch ids kept with one hold (more: not kept)
guard_open('hold', KEYS[3], KEYS[4], {})
local what = ARGV[1]
if what ~= 'hold' and what ~= 'probe' and what ~= 'turn' and what ~= 'kick' and what ~= 'lift'
    and what ~= 'read' then
  return redis.error_reply('ERR hold: unknown request ' .. string.sub(what, 1, 40))
end
local interval = arg_number(2, 'interval_ms', 0, LONGEST_INTERVAL_MS)
local keep = arg_number(6, 'keep_ms', 1, LONGEST_KEEP_MS)
local window = arg_number(10, 'window_ms', 0, LONGEST_KEEP_MS)
local first = math.min(arg_number(11, 'first_ms', 0, LONGEST_INTERVAL_MS), interval)
local scope, batch = ARGV[8], ARGV[9]
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
expect(KEYS[5], 'zset')
local now
if ARGV[7] == '' then
  now = clock_ms()
else
  now = arg_number(7, 'now_ms', 0, 2 ^ 53)
end

-- The hold's times were written as now (since, lifted) or a probe interval from now
-- (probe_at): a time further ahead (a clock, a hand) is refused, so that it cannot keep
-- every sender held with no probe ever due.  A refused start reads as now, a refused probe
-- time as due, a refused lift as none (held: a probe finds out).
local refused = {}
local slack = CLOCK_SLACK_MS
local h = redis.call('HMGET', KEYS[1], 'since', 'probe_at', 'probes', 'lifted')
local since = field_number(refused, KEYS[1], 'since', h[1], 0, now + slack)
if since == nil and h[1] then since = now end -- refused: held from now at least
local probe_at = field_number(refused, KEYS[1], 'probe_at', h[2], 0,
                              now + LONGEST_INTERVAL_MS + slack) or 0
local probes = field_number(refused, KEYS[1], 'probes', h[3], 0, 2 ^ 53) or 0
local lifted = field_number(refused, KEYS[1], 'lifted', h[4], 0, now + slack)
local exists = redis.call('EXISTS', KEYS[1]) == 1
local held = exists and lifted == nil

local function reply(state)
  local text = redis.call('HMGET', KEYS[1], 'cause', 'check', 'game')
  return {state, now, since or 0, probe_at, probes,
          text[1] or '', text[2] or '', text[3] or ''}
end

local function answer(r)
  keep_receipt(KEYS[2], '', r, ARGV[12])
  return r
end

if what == 'read' then
  if held then return reply(1) end
  redis.call('ZREM', KEYS[5], scope)
  return {0, now, 0, 0, 0, '', '', ''}
end
drop_refused(refused)
if held and #refused > 0 then redis.call('HSET', KEYS[1], 'since', since or now) end
if what == 'lift' then
  redis.call('ZREM', KEYS[5], scope)
  if not held then return answer({0, now, 0, 0, 0, '', '', ''}) end
  redis.call('HSET', KEYS[1], 'lifted', now)
  redis.call('PEXPIRE', KEYS[1], math.max(window, 1))
  return answer({2, now, 0, 0, 0, '', '', ''})
end
if what == 'hold' then
  if not held and lifted and batch ~= '' and now - lifted <= window
      and redis.call('HGET', KEYS[1], 's:' .. batch) == ARGV[3] then
    redis.call('HDEL', KEYS[1], 's:' .. batch)
    return answer({3, now, 0, 0, 0, ARGV[3], ARGV[4], ARGV[5]})
  end
  local state = 1
  if not held then
    state = 2
    since, probe_at, probes = now, now + first, 0
    redis.call('HDEL', KEYS[1], 'lifted')
    redis.call('HSET', KEYS[1], 'since', since, 'probe_at', probe_at, 'probes', probes)
  end
  redis.call('HSET', KEYS[1], 'cause', ARGV[3], 'check', ARGV[4], 'game', ARGV[5])
  -- 6 fields of the hold's own, then the suspects
  if batch ~= '' and redis.call('HLEN', KEYS[1]) < 6 + MOST_SUSPECTS then
    redis.call('HSET', KEYS[1], 's:' .. batch, ARGV[3])
  end
  redis.call('PEXPIRE', KEYS[1], keep)
  redis.call('ZADD', KEYS[5], since, scope)
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
  redis.call('ZADD', KEYS[5], since or now, scope)
  return answer(reply(2))
end
return reply(1)
