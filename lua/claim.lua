#!lua flags=allow-oom
-- claim: take up to ARGV[5] batches of one game's oldest events and park them in flight.
-- Idempotent on the batch id: calling again with the same id returns the same batches.
--
-- KEYS[1]  q:<game>   list   the game's buffer
-- KEYS[2]  active     set    games with buffered events
-- KEYS[3]  ring       list   round-robin order of active games
-- KEYS[4]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[5]  batches    hash   batch id -> metadata (JSON)
-- KEYS[6]  payloads   hash   batch id -> entries joined by "\n"
-- KEYS[7]  stats      hash   the shard's counters
-- ARGV[1]  game name
-- ARGV[2]  batch id; the batches are "<id>.0", "<id>.1", ...
-- ARGV[3]  lease token
-- ARGV[4]  events per batch (1-128)
-- ARGV[5]  batches to take at most
-- ARGV[6]  lease length in ms
-- ARGV[7]  max age in ms: older entries are dropped as stale here (0 = keep all)
-- ARGV[8]  linger in ms: take less than a full batch only when the oldest entry is this old
-- returns  {stale dropped, events left in the buffer, batch id 1, entries 1, batch id 2, ...}
local game, base, token = ARGV[1], ARGV[2], ARGV[3]
local size, most = tonumber(ARGV[4]), tonumber(ARGV[5])
local lease, max_age, linger = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local out = {0, 0}
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
  redis.call('LREM', KEYS[3], 0, game)
  return out
end
if len < size and linger > 0 then
  local head = redis.call('LINDEX', KEYS[1], 0)
  if now - tonumber(string.sub(head, 1, 13)) < linger then
    out[2] = len
    return out
  end
end

local taken = redis.call('LRANGE', KEYS[1], 0, size * most - 1)
redis.call('LTRIM', KEYS[1], #taken, -1)
local fresh, stale = {}, 0
for _, entry in ipairs(taken) do
  if max_age > 0 and now - tonumber(string.sub(entry, 1, 13)) > max_age then
    stale = stale + 1
  else
    fresh[#fresh + 1] = entry
  end
end
local batch = 0
local first = 1
while first <= #fresh do
  local last = math.min(first + size - 1, #fresh)
  local id = base .. '.' .. batch
  local meta = cjson.encode({g = game, t = token, a = 0, n = last - first + 1, c = now})
  redis.call('HSET', KEYS[5], id, meta)
  local blob = table.concat(fresh, '\n', first, last)
  redis.call('HSET', KEYS[6], id, blob)
  redis.call('ZADD', KEYS[4], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = blob
  batch = batch + 1
  first = last + 1
end
local left = len - #taken
if left == 0 then
  redis.call('SREM', KEYS[2], game)
  redis.call('LREM', KEYS[3], 0, game)
end
if stale > 0 then redis.call('HINCRBY', KEYS[7], 'stale', stale) end
if #fresh > 0 then
  redis.call('HINCRBY', KEYS[7], 'claimed', #fresh)
  redis.call('HINCRBY', KEYS[7], 'batches_claimed', batch)
end
out[1] = stale
out[2] = left
return out
