#!lua flags=allow-oom
-- claim: take up to ARGV[5] batches of one game's oldest events and park them in flight.
-- Idempotent on the batch id: calling again with the same id returns the same batches, and
-- a claim that made no batch (it only dropped stale or malformed entries) answers the same
-- again from its receipt, dropping nothing more.  Keys of another type are set aside first
-- (lua/_guard.lua): a string at the game's buffer is moved to the quarantine, and the game is
-- unregistered like any empty one.
-- A batch ends at ARGV[4] events or when the next event would take its bytes past ARGV[9]
-- (an event alone over that still makes a batch of one). An entry that is not a 13-digit
-- time followed by one line of event is malformed: it is dead-lettered alone
-- ('<id>.m<k>', reason "malformed entry") so that it never stops its neighbours.
-- In order (ARGV[12] = 1, lua/_order.lua): nothing is claimed while an earlier batch of the
-- game is pending (leased or waiting for a retry), and each batch claimed takes its place
-- in the game's queue.
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
-- KEYS[9]  quarantine list   records set aside, newest first
-- KEYS[10] receipt    string this call's answer, kept for a resend (done:<batch id>)
-- KEYS[11] retry      zset   batch id -> when it is due (ms) (read in order only)
-- KEYS[12] order      zset   the games' queues of pending batches, in order (lua/_order.lua)
-- ARGV[1]  game: game name
-- ARGV[2]  batch_id: batch id; the batches are "<id>.0", "<id>.1", ...
-- ARGV[3]  token: lease token
-- ARGV[4]  batch_size: events per batch (1-128)
-- ARGV[5]  max_batches: batches to take at most
-- ARGV[6]  lease_ms: lease length in ms
-- ARGV[7]  max_age_ms: older entries are dropped as stale here (0 = keep all)
-- ARGV[8]  linger_ms: take less than a full batch only when the oldest entry is this old
-- ARGV[9]  max_bytes: bytes per batch at most, each event's JSON plus ARGV[10] (0 = no limit)
-- ARGV[10] event_overhead: bytes the request adds per event (separator, numbering)
-- ARGV[11] dead_max: most dead-lettered batches kept in this shard
-- ARGV[12] in_order: 1 = the game's batches go first in, first out; 0 = no order kept
-- ARGV[13] receipt_ms: receipt lifetime in ms
-- returns  {stale dropped, events left in the buffer, malformed entries dead-lettered,
--           1 if nothing was claimed because an earlier batch of the game is pending else 0,
--           batch id 1, entries 1, batch id 2, ...}
-- include: _guard
-- include: _dead
-- include: _order
guard_open('claim', KEYS[9], KEYS[7], {'stale', 'claimed', 'batches_claimed',
                                       'malformed_entries', 'dead_events', 'dead_batches',
                                       'dead_dropped'})
local game, base, token = ARGV[1], ARGV[2], ARGV[3]
local size = arg_number(4, 'batch_size', 1, MAX_BATCH_EVENTS)
local most = arg_number(5, 'max_batches', 1, MAX_CLAIM_BATCHES)
local lease = arg_number(6, 'lease_ms', 1, LONGEST_WAIT_MS)
local max_age = arg_number(7, 'max_age_ms', 0, 2 ^ 40)
local linger = arg_number(8, 'linger_ms', 0, LONGEST_WAIT_MS)
local budget = arg_number(9, 'max_bytes', 0, 2 ^ 40)
local overhead = arg_number(10, 'event_overhead', 0, 2 ^ 20)
local keep = arg_number(11, 'dead_max', 0, 2 ^ 31)
local in_order = arg_number(12, 'in_order', 0, 1) == 1
if budget <= 0 then budget = math.huge end

-- The collect time (ms) of a well-formed entry, else nil.  It runs for every entry taken,
-- so the string functions are locals and one match both checks and cuts the 13 digits.
local match, find = string.match, string.find
local function born(entry)
  local digits = match(entry, '^(%d%d%d%d%d%d%d%d%d%d%d%d%d).')
  if digits == nil or find(entry, '\n', 14, true) then return nil end
  return tonumber(digits)
end

-- The batches this id made, if it ran before: {stale, left, malformed, waiting, id 1,
-- entries 1, ...}
local out = {0, 0, 0, 0}
local done = receipt_of(KEYS[10], token, function(r)
  return type(r) == 'table' and #r == 2 and is_whole(r[1]) and is_whole(r[2])
end)
local i = 0
for k = 0, MAX_CLAIM_BATCHES - 1 do
  local id = base .. '.' .. k
  local blob = read('hash', false, 'HGET', KEYS[6], id)
  if not blob then break end
  out[#out + 1] = id
  out[#out + 1] = blob
  i = i + 1
end
if i > 0 or done then
  if done then out[1], out[3] = done[1], done[2] end
  out[2] = read('list', 0, 'LLEN', KEYS[1])
  return out
end

local function unregister()
  expect_ring(KEYS[3], KEYS[2])
  expect(KEYS[2], 'set')
  redis.call('SREM', KEYS[2], game)
  redis.call('ZREM', KEYS[3], game)
end

local now = clock_ms()
local len = read('list', 0, 'LLEN', KEYS[1])
if len == 0 then
  unregister()
  return out
end
-- In order: the game's earlier batches first.  Members whose batch has left are dropped
-- here (when the look was full of them, the next claim reads on).
local gone = {}
if in_order then
  local live, full
  live, gone, full = order_look(KEYS[12], KEYS[4], KEYS[11], game)
  if #live > 0 or full then
    if #gone > 0 and expect(KEYS[12], 'zset') then drop_members(KEYS[12], gone) end
    out[2], out[4] = len, 1
    return out
  end
end
if len < size and linger > 0 then
  local head = born(redis.call('LINDEX', KEYS[1], 0))
  -- A head collected further ahead than the linger (a host's clock, or a hand) is taken now:
  -- waiting for it to age would hold the game's events until that time.
  if head and now - head < linger and head - now < linger then
    out[2] = len
    return out
  end
end

-- Read and cut first; write once every key to be written is known to be of its type.
local taken = redis.call('LRANGE', KEYS[1], 0, size * most - 1)
local parts, part, n, bytes = {}, {}, 0, 0  -- n: entries in part
local oldest = max_age > 0 and now - max_age or -math.huge  -- older than this: stale
local bad = {}
local used, stale = 0, 0
for k = 1, #taken do
  local entry = taken[k]
  local at = born(entry)
  if at == nil then
    bad[#bad + 1] = entry
  elseif at < oldest then
    stale = stale + 1
  else
    local cost = #entry - 13 + overhead
    if n == size or (n > 0 and bytes + cost > budget) then
      parts[#parts + 1] = part
      part, n, bytes = {}, 0, 0
      if #parts == most then break end  -- this entry stays for the next claim
    end
    n = n + 1
    part[n] = entry
    bytes = bytes + cost
  end
  used = k
end
if n > 0 then parts[#parts + 1] = part end
local left = len - used

expect(KEYS[4], 'zset')
expect(KEYS[5], 'hash')
if #bad > 0 then expect(KEYS[8], 'list') end
if in_order then expect(KEYS[12], 'zset') end
local trim = #bad > 0 and plan_trim(KEYS[8], KEYS[5], keep, 100 + #bad, #bad) or {}

local claimed = 0
if in_order then drop_members(KEYS[12], gone) end
for b, events in ipairs(parts) do
  local id = base .. '.' .. (b - 1)
  local blob = table.concat(events, '\n')
  local meta = {g = game, t = token, a = 0, n = #events, c = now}
  if in_order then
    meta.o = order_seq(now, b - 1)
    redis.call('ZADD', KEYS[12], 0, order_member(game, meta.o, id))
  end
  redis.call('HSET', KEYS[5], id, cjson.encode(meta))
  redis.call('HSET', KEYS[6], id, blob)
  redis.call('ZADD', KEYS[4], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = blob
  claimed = claimed + #events
end
local added = {}
for m, entry in ipairs(bad) do
  local id = base .. '.m' .. m
  added[id] = 1
  redis.call('HSET', KEYS[5], id, cjson.encode(
    {g = game, t = '', a = 0, n = 1, c = now, d = now, r = 'malformed entry'}))
  redis.call('HSET', KEYS[6], id, entry)
  redis.call('LPUSH', KEYS[8], id)
end
redis.call('LTRIM', KEYS[1], used, -1)

if left == 0 then unregister() end
if stale > 0 then redis.call('HINCRBY', KEYS[7], 'stale', stale) end
if claimed > 0 then
  redis.call('HINCRBY', KEYS[7], 'claimed', claimed)
  redis.call('HINCRBY', KEYS[7], 'batches_claimed', #parts)
end
local malformed = #bad
if malformed > 0 then
  redis.call('HINCRBY', KEYS[7], 'malformed_entries', malformed)
  redis.call('HINCRBY', KEYS[7], 'dead_events', malformed)
  redis.call('HINCRBY', KEYS[7], 'dead_batches', malformed)
  trim_dead(trim, KEYS[8], KEYS[5], KEYS[6], KEYS[7], added)
end
if #parts == 0 and stale + malformed > 0 then
  keep_receipt(KEYS[10], token, {stale, malformed}, ARGV[13])
end
out[1] = stale
out[2] = left
out[3] = malformed
return out
