#!lua flags=allow-oom
-- replay: move dead-lettered batches back to the retry queue with a fresh attempt budget.
-- Freshness is checked again when they are sent. A batch over the byte limit (one cut before
-- the limit was lowered, or by an older version) is cut again by the claim's rule into
-- '<id>.s1', '<id>.s2', ... A malformed entry's dead letter (reason "malformed entry") can
-- never be sent: it stays dead-lettered, moved to the head of the list, and is counted apart.
-- Sent again after a lost reply (its receipt is there): answers what it answered and replays
-- nothing more.  A dead letter whose metadata cannot be used is set aside (lua/_guard.lua).
-- allow-oom: an operator's command; the batches move from the dead list to the retry set
-- (about the same memory; a recut adds a few hundred bytes per part) so that they can be
-- delivered and freed.
--
-- KEYS[1]  dead       list   dead-lettered batch ids, newest first
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  payloads   hash   batch id -> entries joined by "\n"
-- KEYS[6]  quarantine list   records set aside, newest first
-- KEYS[7]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- ARGV[1]  batch_id: batch id, or '' for the oldest ARGV[2] batches
-- ARGV[2]  limit: batches to replay at most when ARGV[1] is ''
-- ARGV[3]  max_bytes: bytes per batch at most, each event's JSON plus ARGV[4] (0 = no limit)
-- ARGV[4]  event_overhead: bytes the request adds per event
-- ARGV[5]  receipt_ms: receipt lifetime in ms
-- returns  {batches replayed, events replayed, malformed dead letters left in place}
-- include: _guard
guard_open('replay', KEYS[6], KEYS[4], {'replayed'})
local most = arg_number(2, 'limit', 1, 1000)
local budget = arg_number(3, 'max_bytes', 0, 2 ^ 40)
local overhead = arg_number(4, 'event_overhead', 0, 2 ^ 20)
local function is_reply(r)
  return type(r) == 'table' and #r == 3 and is_whole(r[1]) and is_whole(r[2]) and is_whole(r[3])
end
local done = receipt_of(KEYS[7], '', is_reply)
if done then return done end
expect(KEYS[1], 'list')
expect(KEYS[2], 'hash')
expect(KEYS[3], 'zset')
expect(KEYS[5], 'hash')
local ids
if ARGV[1] ~= '' then
  if not redis.call('LPOS', KEYS[1], ARGV[1]) then
    keep_receipt(KEYS[7], '', {0, 0, 0}, ARGV[5])
    return {0, 0, 0}
  end
  ids = {ARGV[1]}
else
  ids = redis.call('LRANGE', KEYS[1], -most, -1)
end
local now = clock_ms()

-- The batch's entries in parts of at most `budget` bytes (a single larger entry alone), or
-- nil when it fits as it is; false if the payload holds more entries than any batch.
local function recut(blob)
  if budget <= 0 or not blob then return nil end
  local parts, part, bytes, total = {}, {}, 0, 0
  local pos = 1
  for _ = 1, MAX_BATCH_EVENTS do
    local stop = string.find(blob, '\n', pos, true) or (#blob + 1)
    local entry = string.sub(blob, pos, stop - 1)
    local cost = #entry - 13 + overhead
    if #part > 0 and bytes + cost > budget then
      parts[#parts + 1] = part
      part, bytes = {}, 0
    end
    part[#part + 1] = entry
    bytes = bytes + cost
    total = total + cost
    pos = stop + 1
    if pos > #blob then
      if total <= budget then return nil end
      parts[#parts + 1] = part
      return parts
    end
  end
  return false
end

-- Read, check and cut every dead letter first; write once all of them are known.
local plan = {}
for _, id in ipairs(ids) do
  local step = {id = id, raw = redis.call('HGET', KEYS[2], id)}
  if step.raw then
    local meta, why = read_meta(step.raw)
    if not meta then
      step.why = why
    elseif meta.r == 'malformed entry' then
      step.malformed = true
    else
      step.events = meta.n
      meta.a, meta.t, meta.d, meta.r, meta.ir = 0, '', nil, nil, nil
      local parts = recut(redis.call('HGET', KEYS[5], id))
      if parts == false then
        step.why = 'a payload of more entries than a batch holds'
      elseif parts then
        step.parts = {}
        for k, part in ipairs(parts) do
          meta.n = #part
          step.parts[k] = {id .. '.s' .. k, cjson.encode(meta), table.concat(part, '\n')}
        end
      else
        step.json = cjson.encode(meta)
      end
    end
  end
  plan[#plan + 1] = step
end

if ARGV[1] ~= '' then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
else
  redis.call('LTRIM', KEYS[1], 0, -#ids - 1)
end
local batches, events, malformed = 0, 0, 0
for _, step in ipairs(plan) do
  if step.why then
    set_aside_batch(KEYS[2], KEYS[5], step.id, step.raw, step.why, false)
  elseif step.malformed then
    redis.call('LPUSH', KEYS[1], step.id)
    malformed = malformed + 1
  elseif step.parts then
    redis.call('HDEL', KEYS[2], step.id)
    redis.call('HDEL', KEYS[5], step.id)
    for _, part in ipairs(step.parts) do
      redis.call('HSET', KEYS[2], part[1], part[2])
      redis.call('HSET', KEYS[5], part[1], part[3])
      redis.call('ZADD', KEYS[3], now, part[1])
    end
    batches = batches + #step.parts
    events = events + step.events
  elseif step.json then
    redis.call('HSET', KEYS[2], step.id, step.json)
    redis.call('ZADD', KEYS[3], now, step.id)
    batches = batches + 1
    events = events + step.events
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'replayed', events) end
keep_receipt(KEYS[7], '', {batches, events, malformed}, ARGV[5])
return {batches, events, malformed}
