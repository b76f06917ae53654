#!lua flags=allow-oom
-- settle: finish a batch the endpoint answered item by item. Its events split three ways:
-- delivered (counted), refused (set aside together as one dead letter of their own, with a
-- reason per event, replayable like any dead batch; counted as rejected_items, or as
-- malformed_entries when the reason is "malformed entry") and to be retried (re-queued as a new
-- batch). The new batches' ids extend the batch's own: '<id>.x<attempt>' for the refused,
-- '<id>.r<attempt>' for the retry, so the lineage shows and each set of events has its own
-- Idempotency-Key. Does nothing unless the caller still holds the lease.  A batch with a
-- place in its game's queue (lua/_order.lua) gives it to its retry part, which is then its
-- game's head; with nothing to retry it leaves the queue.
-- Sent again after a lost reply (its receipt is there): answers what it answered, changes
-- nothing.  Metadata that cannot be used is set aside (lua/_guard.lua), answered as lost.
-- allow-oom: the events only move within the shard (the batch's payload is deleted as the
-- parts are written), so memory stays about the same (and the receipt, a few dozen bytes,
-- expires after its lifetime); refusing it under memory pressure would leave the batch to be
-- sent again.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries joined by "\n"
-- KEYS[4]  retry      zset   batch id -> when it is due (ms)
-- KEYS[5]  dead       list   dead-lettered batch ids, newest first
-- KEYS[6]  stats      hash   the shard's counters
-- KEYS[7]  quarantine list   records set aside, newest first
-- KEYS[8]  receipt    string this call's answer, kept for a resend (done:<batch id>)
-- KEYS[9]  order      zset   the games' queues of pending batches (lua/_order.lua)
-- ARGV[1]  batch_id: batch id
-- ARGV[2]  token: lease token
-- ARGV[3]  stale: events dropped as stale before sending (count; they are in no list below)
-- ARGV[4]  min_delay_ms: least retry delay in ms (the endpoint's Retry-After), 0 if none
-- ARGV[5]  initial_ms: first backoff delay in ms
-- ARGV[6]  max_ms: longest backoff delay in ms
-- ARGV[7]  max_attempts: attempts before dead-lettering (the retry part is dead-lettered when
--          out of them)
-- ARGV[8]  jitter: a random number in [0, 1) for the jitter
-- ARGV[9]  dead_max: most dead-lettered batches kept in this shard
-- ARGV[10] reason: for the retry part (kept with it; with a dead letter when out of attempts)
-- ARGV[11] retry: positions (1-based, in the batch's payload) of the events to retry,
--          comma-separated
-- ARGV[12] refused_count: how many events were refused: R
-- ARGV[13..12+2R] refused: R pairs: position of a refused event, its reason
-- ARGV[13+2R] receipt_ms: (the last) receipt lifetime in ms
-- returns  {delivered, retry id or '', 'retry' or 'dead' or '', delay ms, refused id or ''},
--          or {-1, '', '', 0, ''} if the lease is not held
-- include: _guard
-- include: _dead
-- include: _backoff
-- include: _order
guard_open('settle', KEYS[7], KEYS[6],
           {'dead_events', 'dead_batches', 'rejected_items', 'malformed_entries',
            'batches_retried', 'dead_dropped',
            'delivered', 'batches_delivered', 'stale'})
local id, token = ARGV[1], ARGV[2]
local stale = arg_number(3, 'stale', 0, MAX_BATCH_EVENTS)
local least = arg_number(4, 'min_delay_ms', 0, LONGEST_WAIT_MS)
local first = arg_number(5, 'initial_ms', 0, LONGEST_WAIT_MS)
local longest = arg_number(6, 'max_ms', 0, LONGEST_WAIT_MS)
local attempts = arg_number(7, 'max_attempts', 1, MAX_ATTEMPTS)
local draw = arg_number(8, 'jitter', 0, 1, true)
local keep = arg_number(9, 'dead_max', 0, 2 ^ 31)
local count = arg_number(12, 'refused', 0, MAX_BATCH_EVENTS)
local lost = {-1, '', '', 0, ''}
local function is_reply(r)
  return type(r) == 'table' and #r == 5 and type(r[1]) == 'number' and type(r[2]) == 'string'
    and type(r[3]) == 'string' and is_whole(r[4]) and type(r[5]) == 'string'
end
local raw = read('hash', false, 'HGET', KEYS[2], id)
local held = raw and read('zset', false, 'ZSCORE', KEYS[1], id)
if not held then return receipt_of(KEYS[8], token, is_reply) or lost end

-- The batch's entries: at most a batch's worth (more: the payload is junk, see below).
local function entries_of(blob)
  local entries, pos = {}, 1
  for _ = 1, MAX_BATCH_EVENTS do
    if pos > #blob then return entries end
    local stop = string.find(blob, '\n', pos, true) or (#blob + 1)
    entries[#entries + 1] = string.sub(blob, pos, stop - 1)
    pos = stop + 1
  end
  if pos > #blob then return entries end
  return nil
end

local blob = read('hash', false, 'HGET', KEYS[3], id)
local meta, why, events = check_batch(KEYS[3], id, raw, blob)
local entries
if meta then
  entries = entries_of(blob or '')
  if not entries then
    meta, why, events = nil, 'a payload of more entries than a batch holds', meta.n
  end
end
if not meta then
  set_aside_batch(KEYS[2], KEYS[3], id, raw, why, true, events)
  redis.call('ZREM', KEYS[1], id)
  return lost
end
if meta.t ~= token then return receipt_of(KEYS[8], token, is_reply) or lost end
local n = #entries

local taken = {}
local function take(p)
  p = tonumber(p)
  if not p or p < 1 or p > n or p ~= math.floor(p) or taken[p] then
    return nil
  end
  taken[p] = true
  return entries[p]
end
local retry = {}
for p in string.gmatch(ARGV[11], '[^,]+') do
  local entry = take(p)
  if not entry then return redis.error_reply('settle: bad retry position ' .. p) end
  retry[#retry + 1] = entry
end
local refused, reasons = {}, {}
for i = 1, count do
  local entry = take(ARGV[11 + 2 * i])
  if not entry then return redis.error_reply('settle: bad refused position') end
  refused[#refused + 1] = entry
  reasons[#reasons + 1] = string.sub(ARGV[12 + 2 * i], 1, 200)
end
local delivered = n - stale - #retry - #refused
if delivered < 0 then return redis.error_reply('settle: counts exceed the batch size') end

expect(KEYS[4], 'zset')
expect(KEYS[5], 'list')
local member = queued_member(KEYS[9], id, meta)

-- Every new record built and encoded before the first write.
local now = clock_ms()
local attempt = meta.a + 1
local dead_letters = {} -- {id, metadata JSON, payload, events}
local function dead_letter(new_id, part, reason, item_reasons)
  local m = {g = meta.g, t = '', a = attempt, n = #part, c = meta.c, r = reason, d = now}
  if item_reasons then m.ir = item_reasons end
  dead_letters[#dead_letters + 1] = {new_id, cjson.encode(m), table.concat(part, '\n'), #part}
end

local refused_id, malformed = '', 0
if #refused > 0 then
  refused_id = id .. '.x' .. attempt
  local summary = reasons[1]
  if #refused > 1 then summary = #refused .. ' items refused; first: ' .. reasons[1] end
  dead_letter(refused_id, refused, summary, reasons)
  -- The reporter refuses an event that is not one JSON value itself, before sending it.
  for _, reason in ipairs(reasons) do
    if reason == 'malformed entry' then malformed = malformed + 1 end
  end
end

local retry_id, state, delay, retry_json = '', '', 0, nil
if #retry > 0 then
  retry_id = id .. '.r' .. attempt
  if attempt >= attempts then
    state = 'dead'
    dead_letter(retry_id, retry, ARGV[10], nil)
  else
    state = 'retry'
    delay = math.min(backoff_ms(attempt, first, longest, draw, least), LONGEST_WAIT_MS)
    retry_json = cjson.encode({g = meta.g, t = '', a = attempt, n = #retry, c = meta.c,
                               r = ARGV[10], o = member and meta.o or nil})
  end
end
local trim = #dead_letters > 0
  and plan_trim(KEYS[5], KEYS[2], keep, 100 + #dead_letters, #dead_letters) or {}

redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
local added = {}
for _, letter in ipairs(dead_letters) do
  added[letter[1]] = letter[4]
  redis.call('HSET', KEYS[2], letter[1], letter[2])
  redis.call('HSET', KEYS[3], letter[1], letter[3])
  redis.call('LPUSH', KEYS[5], letter[1])
  redis.call('HINCRBY', KEYS[6], 'dead_events', letter[4])
  redis.call('HINCRBY', KEYS[6], 'dead_batches', 1)
end
if malformed > 0 then redis.call('HINCRBY', KEYS[6], 'malformed_entries', malformed) end
if #refused > malformed then
  redis.call('HINCRBY', KEYS[6], 'rejected_items', #refused - malformed)
end
if member then
  redis.call('ZREM', KEYS[9], member)
  if retry_json then redis.call('ZADD', KEYS[9], 0, order_member(meta.g, meta.o, retry_id)) end
end
if retry_json then
  redis.call('HSET', KEYS[2], retry_id, retry_json)
  redis.call('HSET', KEYS[3], retry_id, table.concat(retry, '\n'))
  redis.call('ZADD', KEYS[4], now + delay, retry_id)
  redis.call('HINCRBY', KEYS[6], 'batches_retried', 1)
end
trim_dead(trim, KEYS[5], KEYS[2], KEYS[3], KEYS[6], added)
if delivered > 0 then
  redis.call('HINCRBY', KEYS[6], 'delivered', delivered)
  redis.call('HINCRBY', KEYS[6], 'batches_delivered', 1)
end
if stale > 0 then redis.call('HINCRBY', KEYS[6], 'stale', stale) end
local reply = {delivered, retry_id, state, delay, refused_id}
keep_receipt(KEYS[8], token, reply, ARGV[#ARGV])
return reply
