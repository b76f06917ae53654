#!lua flags=allow-oom
-- reap: return batches whose lease expired (their reporter died or hung) to the retry queue,
-- charging one attempt, or dead-letter them when out of attempts. Bounded per call.
-- Sent again after a lost reply it reaps only what has expired since (each batch once: the
-- first call took the others out of the lease set), so it needs no receipt.  Metadata that
-- cannot be used is set aside (lua/_guard.lua).
-- allow-oom: each batch moves from the lease set to the retry set or the dead list (about
-- the same memory); the dead list is trimmed to its cap here.  Without it, batches of a
-- crashed reporter would stay leased forever once Redis is full.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  retry      zset   batch id -> when it is due (ms)
-- KEYS[5]  dead       list   dead-lettered batch ids, newest first
-- KEYS[6]  stats      hash   the shard's counters
-- KEYS[7]  quarantine list   records set aside, newest first
-- ARGV[1]  limit: batches to reap at most
-- ARGV[2]  max_attempts: attempts before dead-lettering
-- ARGV[3]  dead_max: most dead-lettered batches kept in this shard
-- returns  {batches returned to retry, batches dead-lettered}
-- include: _guard
-- include: _dead
guard_open('reap', KEYS[7], KEYS[6], {'dead_events', 'dead_batches', 'batches_reaped',
                                      'dead_dropped'})
local now = clock_ms()
local expired = read('zset', {}, 'ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0,
                     tonumber(ARGV[1]))
if #expired == 0 then return {0, 0} end
expect(KEYS[2], 'hash')
expect(KEYS[3], 'hash')
expect(KEYS[4], 'zset')
expect(KEYS[5], 'list')
local retried, dead = 0, 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local raw = redis.call('HGET', KEYS[2], id)
  local meta = raw and usable_batch(KEYS[2], KEYS[3], id, raw, true)
  if meta then
    meta.a = meta.a + 1
    meta.t = ''
    meta.r = 'lease expired'
    if meta.a >= tonumber(ARGV[2]) then
      meta.d = now
      redis.call('LPUSH', KEYS[5], id)
      redis.call('HINCRBY', KEYS[6], 'dead_events', meta.n)
      redis.call('HINCRBY', KEYS[6], 'dead_batches', 1)
      dead = dead + 1
    else
      redis.call('ZADD', KEYS[4], now, id)
      retried = retried + 1
    end
    redis.call('HSET', KEYS[2], id, cjson.encode(meta))
  end
end
if dead > 0 then
  trim_dead(KEYS[5], KEYS[2], KEYS[3], KEYS[6], tonumber(ARGV[3]), 100 + dead)
end
if retried + dead > 0 then redis.call('HINCRBY', KEYS[6], 'batches_reaped', retried + dead) end
return {retried, dead}
