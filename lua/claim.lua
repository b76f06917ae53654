#!lua flags=allow-oom
-- claim: take up to ARGV[5] batches of one game's oldest events and park them in flight.
-- Idempotent on the batch id: calling again with the same id returns the same batches.
-- A batch ends at ARGV[4] events or when the next event would take its bytes past ARGV[9]
-- (an event alone over that still makes a batch of one). An entry that is not a 13-digit
-- time followed by one line of event is malformed: it is dead-lettered alone
-- ('<id>.m<k>', reason "malformed entry") so that it never stops its neighbours.
-- allow-oom: draining a full Redis starts with a claim, so it must run at maxmemory, although
-- it does not free memory by itself: the entries move from the list into the batch payloads
-- (LTRIM frees about what HSET takes) and each batch adds its metadata, its lease entry and
-- the allocator's rounding of its payload.  Measured (bench/memory_full.py): -0.4 to +0.6 KB
-- per batch of 128 entries of 91 bytes, +0.2 to +1.8 KB with entries of 51 bytes; the ack
-- then frees the whole batch (52 to 93 bytes per event).  The growth is bounded and
-- short-lived: a worker holds one claim at a time, so a reporter has at most (workers +
-- hot-game threads) x max_batches_per_claim batches in flight; stale entries are dropped here
-- (freed); a failing endpoint closes the SinkGate, so claims stop while batches cannot be
-- finished.  A 4 MB and a 16 MB Redis filled to maxmemory and drained went 0.3 to 0.6 MB
-- over it at the peak ("Redis memory" in docs/operations.md).
--
-- KEYS[1]  q:<game>   list   the game's buffer
-- KEYS[2]  active     set    games with buffered events
-- KEYS[3]  ring       zset   active games, all scored 0 (ZREM: O(log n), no scan)
-- KEYS[4]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[5]  batches    hash   batch id -> metadata (JSON)
-- KEYS[6]  payloads   hash   batch id -> entries joined by "\n"
-- KEYS[7]  stats      hash   the shard's counters
-- KEYS[8]  dead       list   dead-lettered batch ids, newest first
-- ARGV[1]  game name
-- ARGV[2]  batch id; the batches are "<id>.0", "<id>.1", ...
-- ARGV[3]  lease token
-- ARGV[4]  events per batch (1-128)
-- ARGV[5]  batches to take at most
-- ARGV[6]  lease length in ms
-- ARGV[7]  max age in ms: older entries are dropped as stale here (0 = keep all)
-- ARGV[8]  linger in ms: take less than a full batch only when the oldest entry is this old
-- ARGV[9]  bytes per batch at most, counting each event's JSON plus ARGV[10] (0 = no limit)
-- ARGV[10] bytes the request adds per event (separator, numbering)
-- ARGV[11] most dead-lettered batches kept in this shard
-- returns  {stale dropped, events left in the buffer, malformed entries dead-lettered,
--           batch id 1, entries 1, batch id 2, ...}
-- include: _dead
local game, base, token = ARGV[1], ARGV[2], ARGV[3]
local size, most = tonumber(ARGV[4]), tonumber(ARGV[5])
local lease, max_age, linger = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local budget, overhead = tonumber(ARGV[9]), tonumber(ARGV[10])
if budget <= 0 then budget = math.huge end

-- The collect time (ms) of a well-formed entry, else nil.
local function born(entry)
  if #entry <= 13 or not string.find(entry, '^%d%d%d%d%d%d%d%d%d%d%d%d%d')
      or string.find(entry, '\n', 14, true) then
    return nil
  end
  return tonumber(string.sub(entry, 1, 13))
end

local out = {0, 0, 0}
local i = 0
while redis.call('HEXISTS', KEYS[6], base .. '.' .. i) == 1 do
  local id = base .. '.' .. i
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[6], id)
  i = i + 1
end
if i > 0 then
  out[2] = redis.call('LLEN', KEYS[1])
  return out
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local len = redis.call('LLEN', KEYS[1])
if len == 0 then
  redis.call('SREM', KEYS[2], game)
  redis.call('ZREM', KEYS[3], game)
  return out
end
if len < size and linger > 0 then
  local head = born(redis.call('LINDEX', KEYS[1], 0))
  if head and now - head < linger then
    out[2] = len
    return out
  end
end

local batch, claimed = 0, 0
local part, bytes = {}, 0
local function seal()
  local id = base .. '.' .. batch
  local blob = table.concat(part, '\n')
  redis.call('HSET', KEYS[5], id, cjson.encode({g = game, t = token, a = 0, n = #part, c = now}))
  redis.call('HSET', KEYS[6], id, blob)
  redis.call('ZADD', KEYS[4], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = blob
  claimed = claimed + #part
  batch = batch + 1
  part, bytes = {}, 0
end

local taken = redis.call('LRANGE', KEYS[1], 0, size * most - 1)
local used, stale, malformed = 0, 0, 0
for k, entry in ipairs(taken) do
  local at = born(entry)
  if at == nil then
    malformed = malformed + 1
    local id = base .. '.m' .. malformed
    redis.call('HSET', KEYS[5], id, cjson.encode(
      {g = game, t = '', a = 0, n = 1, c = now, d = now, r = 'malformed entry'}))
    redis.call('HSET', KEYS[6], id, entry)
    redis.call('LPUSH', KEYS[8], id)
  elseif max_age > 0 and now - at > max_age then
    stale = stale + 1
  else
    local cost = #entry - 13 + overhead
    if #part == size or (#part > 0 and bytes + cost > budget) then
      seal()
      if batch == most then break end  -- this entry stays for the next claim
    end
    part[#part + 1] = entry
    bytes = bytes + cost
  end
  used = k
end
if #part > 0 then seal() end
redis.call('LTRIM', KEYS[1], used, -1)

local left = len - used
if left == 0 then
  redis.call('SREM', KEYS[2], game)
  redis.call('ZREM', KEYS[3], game)
end
if stale > 0 then redis.call('HINCRBY', KEYS[7], 'stale', stale) end
if claimed > 0 then
  redis.call('HINCRBY', KEYS[7], 'claimed', claimed)
  redis.call('HINCRBY', KEYS[7], 'batches_claimed', batch)
end
if malformed > 0 then
  redis.call('HINCRBY', KEYS[7], 'malformed_entries', malformed)
  redis.call('HINCRBY', KEYS[7], 'dead_events', malformed)
  redis.call('HINCRBY', KEYS[7], 'dead_batches', malformed)
  trim_dead(KEYS[8], KEYS[5], KEYS[6], KEYS[7], tonumber(ARGV[11]), 100 + malformed)
end
out[1] = stale
out[2] = left
out[3] = malformed
return out
