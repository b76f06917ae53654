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
local done = receipt_of(KEYS[7], '')
if done then return done end
expect(KEYS[1], 'list')
expect(KEYS[2], 'hash')
expect(KEYS[3], 'zset')
expect(KEYS[5], 'hash')
local ids
if ARGV[1] ~= '' then
  if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
    keep_receipt(KEYS[7], '', {0, 0, 0}, ARGV[5])
    return {0, 0, 0}
  end
  ids = {ARGV[1]}
else
  local most = tonumber(ARGV[2])
  ids = redis.call('LRANGE', KEYS[1], -most, -1)
  redis.call('LTRIM', KEYS[1], 0, -most - 1)
end
local budget, overhead = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = clock_ms()

-- The batch's entries in parts of at most `budget` bytes (a single larger entry alone), or
-- nil when it fits as it is.
local function recut(id)
  local blob = redis.call('HGET', KEYS[5], id)
  if budget <= 0 or not blob then return nil end
  local parts, part, bytes, total = {}, {}, 0, 0
  local pos = 1
  while pos <= #blob do
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
  end
  if total <= budget then return nil end
  parts[#parts + 1] = part
  return parts
end

local batches, events, malformed = 0, 0, 0
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[2], id)
  local meta, why
  if raw then meta, why = read_meta(raw) end
  if raw and not meta then
    set_aside_batch(KEYS[2], KEYS[5], id, raw, why, false)
  elseif meta then
    if meta.r == 'malformed entry' then
      redis.call('LPUSH', KEYS[1], id)
      malformed = malformed + 1
    else
      events = events + meta.n
      meta.a, meta.t, meta.d, meta.r, meta.ir = 0, '', nil, nil, nil
      local parts = recut(id)
      if parts then
        redis.call('HDEL', KEYS[2], id)
        redis.call('HDEL', KEYS[5], id)
        for k, part in ipairs(parts) do
          local part_id = id .. '.s' .. k
          meta.n = #part
          redis.call('HSET', KEYS[2], part_id, cjson.encode(meta))
          redis.call('HSET', KEYS[5], part_id, table.concat(part, '\n'))
          redis.call('ZADD', KEYS[3], now, part_id)
        end
        batches = batches + #parts
      else
        redis.call('HSET', KEYS[2], id, cjson.encode(meta))
        redis.call('ZADD', KEYS[3], now, id)
        batches = batches + 1
      end
    end
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'replayed', events) end
keep_receipt(KEYS[7], '', {batches, events, malformed}, ARGV[5])
return {batches, events, malformed}
