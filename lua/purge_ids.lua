#!lua flags=allow-oom
-- purge_ids: delete the named dead-lettered batches for good, counting their events.  A
-- batch that is no longer on the dead list (replayed or purged meanwhile) is left alone.
-- allow-oom: it only deletes (and bumps a counter): the operator's way to free memory.
--
-- KEYS[1]  dead       list   dead-lettered batch ids, newest first
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- ARGV     the batch ids to delete (at most a few hundred per call: each is an LREM)
-- returns  {batches deleted, events deleted}
local batches, events = 0, 0
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 1, id) == 1 then
    local raw = redis.call('HGET', KEYS[2], id)
    if raw then events = events + cjson.decode(raw).n end
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    batches = batches + 1
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'purged', events) end
return {batches, events}
