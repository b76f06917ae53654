#!lua flags=allow-oom
-- reserve_slot: a request rate shared by every process that uses the key, kept as a generic
-- cell rate algorithm (GCRA).  For each scope (the whole key, or one name in it: a game's
-- bizId) the hash keeps the time of the next free slot, its theoretical arrival time (TAT).
-- A caller reserves that slot (it may lie ahead: the caller sleeps until it) and the next
-- one is `interval` later, so slots are `interval` apart whoever takes them, no second holds
-- more than ceil(1 s / interval) of them, and a slot nobody was waiting for is never lent
-- to a later burst: an idle scope's next slot is simply now.  While anyone waits the slots
-- follow one another back to back, so none is lost.  A slot further ahead than `horizon` is
-- not reserved (the caller hands its work back and comes again); horizon -1 only looks.
-- A pause (an endpoint that says "too many requests") puts every scope's next slot at its
-- end.  Sent again after a lost reply (its receipt is there): answers what it answered and
-- reserves nothing more.  A hash of another type is set aside in the limiter's own
-- quarantine (lua/_guard.lua) and the scopes start free.
-- allow-oom: it rewrites one or two fields of one small hash; refusing it when memory is
-- full would stop the sends whose acknowledgements free that memory; each call's receipt (a
-- few dozen bytes) expires after its lifetime.
--
-- KEYS[1]  slots      hash   t:<scope> (us, the scope's next free slot), paused_until (us)
-- KEYS[2]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- KEYS[3]  quarantine list   the limiter's records set aside, newest first
-- KEYS[4]  stats      hash   the limiter's counters (only of what is set aside)
-- ARGV[1]  interval_us: us between two slots (>= 1)
-- ARGV[2]  scope: '' for the whole key, else a name with slots of its own
-- ARGV[3]  horizon_us: reserve only a slot at most this many us ahead; -1: look, reserve nothing
-- ARGV[4]  pause_ms: pause in ms from now (0 = none): no slot of any scope before then
-- ARGV[5]  now_us: the time in us, or '' for Redis TIME (tests of the algorithm give their own)
-- ARGV[6]  receipt_ms: receipt lifetime in ms
-- returns  {1 if a slot was reserved else 0, us from now until that slot (or until the next
--           free one), slots reserved ahead of it}
-- include: _guard
local LONGEST_PAUSE_MS = 3600000    -- a pause asked (an endpoint's Retry-After is cut at 600 s)
local LONGEST_AHEAD_US = 3600000000 -- an interval, and a horizon, at most
guard_open('reserve_slot', KEYS[3], KEYS[4], {})
local interval = arg_number(1, 'interval_us', 1, LONGEST_AHEAD_US)
local horizon = arg_number(3, 'horizon_us', -1, LONGEST_AHEAD_US)
local pause = arg_number(4, 'pause_ms', 0, LONGEST_PAUSE_MS)
local function is_reply(r)
  return type(r) == 'table' and #r == 3 and is_whole(r[1]) and is_whole(r[2]) and is_whole(r[3])
end
local done = receipt_of(KEYS[2], '', is_reply)
if done then return done end
local field = 't:' .. ARGV[2]
local now
if ARGV[5] == '' then
  now = clock_us()
else
  now = arg_number(5, 'now_us', 0, 2 ^ 53)
end

-- A slot lies at most a horizon and an interval ahead, a pause at most the longest pause:
-- a time further ahead (a clock, a hand) is refused, so that it cannot stop every sender.
local state = read('hash', {}, 'HMGET', KEYS[1], field, 'paused_until')
local refused = {}
local slack_us = CLOCK_SLACK_MS * 1000
local tat = field_number(refused, KEYS[1], field, state[1], -2 ^ 53,
                         now + LONGEST_AHEAD_US + interval + slack_us) or now
local paused_until = field_number(refused, KEYS[1], 'paused_until', state[2], -2 ^ 53,
                                  now + LONGEST_PAUSE_MS * 1000 + slack_us) or 0
if pause > 0 then paused_until = math.max(paused_until, now + pause * 1000) end
local slot = math.max(tat, now, paused_until)
local ahead = math.floor((math.max(tat, now) - now) / interval)
local reserved = horizon >= 0 and slot - now <= horizon
if not reserved and pause <= 0 and #refused == 0 then
  return {0, slot - now, ahead}  -- nothing written: no receipt needed
end

drop_refused(refused)
-- Times as whole microseconds: tostring() keeps only 14 digits.
if reserved then
  redis.call('HSET', KEYS[1], field, string.format('%.0f', slot + interval))
end
if pause > 0 then
  redis.call('HSET', KEYS[1], 'paused_until', string.format('%.0f', paused_until))
end
-- A scope whose last slot has passed is as good as absent: keep the hash a minute longer
-- than its furthest slot or pause (other scopes' slots may lie further ahead: never shorten,
-- unless the key is kept longer than any slot or pause can last: junk, like a value refused).
local keep_ms = math.ceil((math.max(slot + interval, paused_until) - now) / 1000) + 60000
local kept_ms = redis.call('PTTL', KEYS[1])
if kept_ms < keep_ms or kept_ms > (3 * LONGEST_AHEAD_US) / 1000 + LONGEST_PAUSE_MS + 120000 then
  redis.call('PEXPIRE', KEYS[1], keep_ms)
end
local reply = {reserved and 1 or 0, slot - now, ahead}
keep_receipt(KEYS[2], '', reply, ARGV[6])
return reply
