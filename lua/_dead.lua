-- (included by the scripts that dead-letter: claim, nack, reap, settle)
-- Keeps a shard's dead list at most `keep` long: the oldest fall off its tail, their events
-- counted as dead_dropped. At most `most` go per call (a cap lowered by much is reached over
-- several calls, each of them short).
local function trim_dead(dead, batches, payloads, stats, keep, most)
  local excess = math.min(redis.call('LLEN', dead) - keep, most)
  for _ = 1, excess do
    local old = redis.call('RPOP', dead)
    local gone = redis.call('HGET', batches, old)
    if gone then
      redis.call('HINCRBY', stats, 'dead_dropped', cjson.decode(gone).n)
      redis.call('HDEL', batches, old)
      redis.call('HDEL', payloads, old)
    end
  end
end
