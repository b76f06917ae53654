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
guard_open('take_tokens', KEYS[3], KEYS[4], {})
local done = receipt_of(KEYS[2], '')
if done then return done end
local SCARCE_US = 1000000
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local wanted, pause = tonumber(ARGV[3]), tonumber(ARGV[4])
local spare = ARGV[6] == '1'
local now
if ARGV[5] == '' then
  now = clock_us()
else
  now = tonumber(ARGV[5])
end

local state = read('hash', {}, 'HMGET', KEYS[1], 'tokens', 'at', 'paused_until', 'refused_at')
-- A field that is not a finite number (junk) reads as absent.
local function number(value)
  local x = tonumber(value)
  if x and x == x and x > -math.huge and x < math.huge then return x end
  return nil
end
local tokens = number(state[1]) or capacity
local at = number(state[2]) or now
local paused_until = number(state[3]) or 0
local refused_at = number(state[4]) or -SCARCE_US
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

-- Times as whole microseconds: tostring() keeps only 14 digits.
redis.call('HSET', KEYS[1], 'tokens', string.format('%.9f', tokens),
           'at', string.format('%.0f', math.max(now, at)),
           'paused_until', string.format('%.0f', paused_until),
           'refused_at', string.format('%.0f', refused_at))
-- An idle bucket refills to full and can go: keep it a little longer than that takes.
local idle_ms = math.ceil(capacity * 1000 / rate) + 60000
redis.call('PEXPIRE', KEYS[1], math.max(idle_ms, math.ceil((paused_until - now) / 1000) + 1000))
local reply = {granted, wait, scarce and 1 or 0}
keep_receipt(KEYS[2], '', reply, ARGV[7])
return reply
