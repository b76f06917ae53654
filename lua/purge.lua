#!lua flags=allow-oom
-- purge: delete the oldest dead-lettered batches for good, counting their events.
-- allow-oom: it only deletes (and bumps a counter): the operator's way to free memory.
--
-- KEYS[1]  dead       list   dead-lettered batch ids, newest first
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- ARGV[1]  batches to delete at most
-- returns  {batches deleted, events deleted}
local most = tonumber(ARGV[1])
local ids = redis.call('LRANGE', KEYS[1], -most, -1)
redis.call('LTRIM', KEYS[1], 0, -most - 1)
local events = 0
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    events = events + cjson.decode(raw).n
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'purged', events) end
return {#ids, events}
