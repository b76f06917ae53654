-- (included by the scripts that dead-letter: claim, nack, reap, settle; after _guard)
-- Keeps a shard's dead list at most `keep` long: the oldest fall off its tail, their events
-- counted as dead_dropped. At most `most` go per call (a cap lowered by much is reached over
-- several calls, each of them short).  One whose metadata cannot be used is moved to the
-- quarantine instead (its events were counted in dead_events when it died).
local function trim_dead(dead, batches, payloads, stats, keep, most)
  local excess = math.min(redis.call('LLEN', dead) - keep, most)
  for _ = 1, excess do
    local old = redis.call('RPOP', dead)
    local gone = redis.call('HGET', batches, old)
    if gone then
      local meta, why = read_meta(gone)
      if meta then
        redis.call('HINCRBY', stats, 'dead_dropped', meta.n)
        redis.call('HDEL', batches, old)
        redis.call('HDEL', payloads, old)
      else
        set_aside_batch(batches, payloads, old, gone, why, false)
      end
    end
  end
end
