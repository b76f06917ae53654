#!lua flags=allow-oom
-- take_tokens: a token bucket shared by every process that uses the key: up to `capacity`
-- tokens, refilled continuously at `rate` per second; a caller takes what it may use now.
-- With capacity 1 takers are spaced 1/rate apart, so no window of one second holds more
-- than `rate` takes. A pause (an endpoint that says "too many requests") empties the bucket
-- and grants nothing until it ends. Tokens are scarce for a second after a caller who would
-- have waited for one was refused; a "spare" caller (a batch that is not full) then gets
-- none, so full batches get the requests first, whichever process asks.
-- Sent again after a lost reply (its receipt is there): answers what it answered, and takes
-- (or gives back) nothing more.  A bucket of another type is set aside in the limiter's own
-- quarantine (lua/_guard.lua: the bucket's hash tag is not a shard's) and starts full.
-- allow-oom: it rewrites a few fields of one small hash; refusing it when memory is full
-- would stop the claims whose deliveries free that memory; each call's receipt (a few dozen
-- bytes) expires after its lifetime.
--
-- KEYS[1]  bucket     hash   tokens (float), at (us), paused_until (us), refused_at (us)
-- KEYS[2]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- KEYS[3]  quarantine list   the limiter's records set aside, newest first
-- KEYS[4]  stats      hash   the limiter's counters (only of what is set aside)
-- ARGV[1]  rate: tokens per second (> 0)
-- ARGV[2]  capacity: most tokens the bucket holds (>= 1)
-- ARGV[3]  wanted: tokens wanted now (>= 0); negative gives tokens back (unused), up to capacity
-- ARGV[4]  pause_ms: pause in ms from now (0 = none): grant nothing until then
-- ARGV[5]  now_us: the time in us, or '' for Redis TIME (tests of the algorithm give their own)
-- ARGV[6]  spare: '1': a spare caller, served only while tokens are not scarce; '' otherwise
-- ARGV[7]  receipt_ms: receipt lifetime in ms
-- returns  {tokens granted, us until the next token (or until the pause ends),
--           1 if tokens are scarce else 0}
-- include: _guard
local LONGEST_PAUSE_MS = 3600000 -- a pause asked (an endpoint's Retry-After is cut at 600 s)
guard_open('take_tokens', KEYS[3], KEYS[4], {})
local rate = arg_number(1, 'rate', 1e-9, 1e9, true)
local capacity = arg_number(2, 'capacity', 1, 1e9)
local wanted = arg_number(3, 'wanted', -1e9, 1e9)
local pause = arg_number(4, 'pause_ms', 0, LONGEST_PAUSE_MS)
local function is_reply(r)
  return type(r) == 'table' and #r == 3 and is_whole(r[1]) and is_whole(r[2]) and is_whole(r[3])
end
local done = receipt_of(KEYS[2], '', is_reply)
if done then return done end
local SCARCE_US = 1000000
local spare = ARGV[6] == '1'
local now
if ARGV[5] == '' then
  now = clock_us()
else
  now = arg_number(5, 'now_us', 0, 2 ^ 53)
end

-- Times are written as now (at, refused_at) or a pause from now: a time further ahead (a
-- clock, a hand) is refused, and so are tokens below none, so that junk cannot stop every
-- sender.  Tokens above the capacity (the burst lowered since) are simply cut to it.
local state = read('hash', {}, 'HMGET', KEYS[1], 'tokens', 'at', 'paused_until', 'refused_at')
local refused = {}
local slack_us = CLOCK_SLACK_MS * 1000
local tokens = field_number(refused, KEYS[1], 'tokens', state[1], 0, 2 ^ 53) or capacity
tokens = math.min(tokens, capacity)
local at = field_number(refused, KEYS[1], 'at', state[2], -2 ^ 53, now + slack_us) or now
local paused_until = field_number(refused, KEYS[1], 'paused_until', state[3], -2 ^ 53,
                                  now + LONGEST_PAUSE_MS * 1000 + slack_us) or 0
local refused_at = field_number(refused, KEYS[1], 'refused_at', state[4], -2 ^ 53,
                                now + slack_us) or -SCARCE_US
-- A pause empties the bucket; it refills from the pause's end.
local from = math.max(at, paused_until)
if now > from then tokens = math.min(capacity, tokens + (now - from) * rate / 1000000) end
if pause > 0 then
  paused_until = math.max(paused_until, now + pause * 1000)
  tokens = 0
end
local scarce = now - refused_at < SCARCE_US

local granted, wait = 0, 0
if now < paused_until then
  wait = paused_until - now
  tokens = 0
elseif wanted < 0 then
  tokens = math.min(capacity, tokens - wanted)
elseif spare and scarce then
  wait = math.ceil(math.max(0, 1 - tokens) * 1000000 / rate)
else
  granted = math.min(wanted, math.floor(tokens))
  tokens = tokens - granted
  if granted < wanted then
    wait = math.ceil((1 - tokens) * 1000000 / rate)
    if granted == 0 and not spare then
      refused_at = now
      scarce = true
    end
  end
end

drop_refused(refused)
-- Times as whole microseconds: tostring() keeps only 14 digits.
redis.call('HSET', KEYS[1], 'tokens', string.format('%.9f', tokens),
           'at', string.format('%.0f', math.max(now, at)),
           'paused_until', string.format('%.0f', paused_until),
           'refused_at', string.format('%.0f', refused_at))
-- An idle bucket refills to full and can go: keep it a little longer than that takes (a
-- month at most: a bucket that slow starts full again after it).
local idle_ms = math.min(math.ceil(capacity * 1000 / rate) + 60000, 2592000000)
redis.call('PEXPIRE', KEYS[1], math.max(idle_ms, math.ceil((paused_until - now) / 1000) + 1000))
local reply = {granted, wait, scarce and 1 or 0}
keep_receipt(KEYS[2], '', reply, ARGV[7])
return reply
