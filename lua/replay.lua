#!lua flags=allow-oom
-- replay: move dead-lettered batches back to the retry queue with a fresh attempt budget.
-- Freshness is checked again when they are sent.
--
-- KEYS[1]  dead       list   dead-lettered batch ids, newest first
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  stats      hash   the shard's counters
-- ARGV[1]  batch id, or '' for the oldest ARGV[2] batches
-- ARGV[2]  batches to replay at most when ARGV[1] is ''
-- returns  {batches replayed, events replayed}
local ids
if ARGV[1] ~= '' then
  if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return {0, 0} end
  ids = {ARGV[1]}
else
  local most = tonumber(ARGV[2])
  ids = redis.call('LRANGE', KEYS[1], -most, -1)
  redis.call('LTRIM', KEYS[1], 0, -most - 1)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local events = 0
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    local meta = cjson.decode(raw)
    meta.a, meta.t, meta.d, meta.r, meta.ir = 0, '', nil, nil, nil
    redis.call('HSET', KEYS[2], id, cjson.encode(meta))
    redis.call('ZADD', KEYS[3], now, id)
    events = events + meta.n
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'replayed', events) end
return {#ids, events}
