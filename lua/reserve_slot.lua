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
-- end, and the answer says how long it still runs, so that a caller who reserved a slot
-- before it began gives that slot up when its time comes.
-- A lost state (Redis restarted empty, a failover to a replica without it): the hash keeps
-- the time it was first written (`born`), every answer says it, and a caller passes the one
-- it saw last.  Absent, or born at another time than the caller saw, the state was lost,
-- and so were the slots others reserved and the pause that ran: every scope is paused for
-- lost_pause_us (the longest a slot is reserved ahead), nothing is reserved by this call, and
-- the answer says so (the callers put back a longer pause they know of).  A caller that saw no
-- state yet (a process starting) only creates it.  The hash is kept an hour past its last
-- use (a look too), so a state that expired of idleness is not taken for a lost one by a
-- caller that used it within the last 50 minutes (reporter._pacing.slots forgets what it saw
-- after that).
-- Sent again after a lost reply (its receipt is there): answers what it answered and
-- reserves nothing more.  A hash of another type is set aside in the limiter's own
-- quarantine (lua/_guard.lua) and the scopes start free.
-- allow-oom: it rewrites one or two fields of one small hash; refusing it when memory is
-- full would stop the sends whose acknowledgements free that memory; each call's receipt (a
-- few dozen bytes) expires after its lifetime.
--
-- KEYS[1]  slots      hash   t:<scope> (us, the scope's next free slot), paused_until (us),
--                            born (us, when the state was first written)
-- KEYS[2]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- KEYS[3]  quarantine list   the limiter's records set aside, newest first
-- KEYS[4]  stats      hash   the limiter's counters (only of what is set aside)
-- ARGV[1]  interval_us: us between two slots (>= 1)
-- ARGV[2]  scope: '' for the whole key, else a name with slots of its own
-- ARGV[3]  horizon_us: reserve only a slot at most this many us ahead; -1: look, reserve nothing
-- ARGV[4]  pause_ms: pause in ms from now (0 = none): no slot of any scope before then
-- ARGV[5]  now_us: the time in us, or '' for Redis TIME (tests of the algorithm give their own)
-- ARGV[6]  known: the state's born time the caller saw last ('' if none)
-- ARGV[7]  lost_pause_us: how long every scope pauses when the state is found lost
-- ARGV[8]  receipt_ms: receipt lifetime in ms
-- returns  {1 if a slot was reserved else 0, us from now until that slot (or until the next
--           free one), slots reserved ahead of it, us the pause still runs (0: none), the
--           state's born time, 1 if this call found the state lost else 0}
-- include: _guard
local LONGEST_PAUSE_MS = 3600000    -- a pause asked (an endpoint's Retry-After is cut at 600 s)
local LONGEST_AHEAD_US = 3600000000 -- an interval, and a horizon, at most
local KEEP_MS = 3600000             -- the state is kept this long after its last use
guard_open('reserve_slot', KEYS[3], KEYS[4], {})
local interval = arg_number(1, 'interval_us', 1, LONGEST_AHEAD_US)
local horizon = arg_number(3, 'horizon_us', -1, LONGEST_AHEAD_US)
local pause = arg_number(4, 'pause_ms', 0, LONGEST_PAUSE_MS)
local lost_pause = arg_number(7, 'lost_pause_us', 0, LONGEST_AHEAD_US)
local known = ARGV[6]
local function is_reply(r)
  return type(r) == 'table' and #r == 6 and is_whole(r[1]) and is_whole(r[2]) and is_whole(r[3])
    and is_whole(r[4]) and type(r[5]) == 'string' and is_whole(r[6])
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
local state = read('hash', {}, 'HMGET', KEYS[1], field, 'paused_until', 'born')
local refused = {}
local slack_us = CLOCK_SLACK_MS * 1000
local tat = field_number(refused, KEYS[1], field, state[1], -2 ^ 53,
                         now + LONGEST_AHEAD_US + interval + slack_us) or now
local paused_until = field_number(refused, KEYS[1], 'paused_until', state[2], -2 ^ 53,
                                  now + LONGEST_PAUSE_MS * 1000 + slack_us) or 0
local born = field_number(refused, KEYS[1], 'born', state[3], 0, now + slack_us)
-- Times as whole microseconds: tostring() keeps only 14 digits.
local born_text = born and string.format('%.0f', born) or ''
local lost = known ~= '' and known ~= born_text
local fresh = born == nil -- absent (or refused): written now
if fresh then born_text = string.format('%.0f', now) end
if lost then paused_until = math.max(paused_until, now + lost_pause) end
if pause > 0 then paused_until = math.max(paused_until, now + pause * 1000) end
local slot = math.max(tat, now, paused_until)
local ahead = math.floor((math.max(tat, now) - now) / interval)
local reserved = not lost and horizon >= 0 and slot - now <= horizon
local paused_us = math.max(0, paused_until - now)
if not reserved and pause <= 0 and not lost and not fresh and #refused == 0 then
  -- a look: it only keeps the state for the hour (no receipt needed: done twice, the same)
  if redis.call('PTTL', KEYS[1]) < KEEP_MS then redis.call('PEXPIRE', KEYS[1], KEEP_MS) end
  return {0, slot - now, ahead, paused_us, born_text, 0}
end

drop_refused(refused)
if fresh then redis.call('HSET', KEYS[1], 'born', born_text) end
if reserved then
  redis.call('HSET', KEYS[1], field, string.format('%.0f', slot + interval))
end
if pause > 0 or lost then
  redis.call('HSET', KEYS[1], 'paused_until', string.format('%.0f', paused_until))
end
-- A scope whose last slot has passed is as good as absent; the hash is kept an hour, or a
-- minute longer than its furthest slot or pause (other scopes' slots may lie further ahead:
-- never shorten, unless the key is kept longer than any slot or pause can last: junk, like a
-- value refused).
local keep_ms = math.max(KEEP_MS,
                         math.ceil((math.max(slot + interval, paused_until) - now) / 1000) + 60000)
local kept_ms = redis.call('PTTL', KEYS[1])
if kept_ms < keep_ms or kept_ms > (3 * LONGEST_AHEAD_US) / 1000 + LONGEST_PAUSE_MS + 120000 then
  redis.call('PEXPIRE', KEYS[1], keep_ms)
end
local reply = {reserved and 1 or 0, slot - now, ahead, paused_us, born_text, lost and 1 or 0}
keep_receipt(KEYS[2], '', reply, ARGV[8])
return reply
