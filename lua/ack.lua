#!lua flags=allow-oom
-- ack: finish a batch the endpoint accepted whole (some of its events may have been dropped
-- as stale before sending). Does nothing unless the caller still holds the lease.
-- allow-oom: it only deletes (the batch's metadata and payload) and bumps counters.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- ARGV[1]  batch id
-- ARGV[2]  lease token
-- ARGV[3]  events dropped as stale before sending (count)
-- returns  events counted as delivered, or -1 if the lease is not held
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then return -1 end
local meta = cjson.decode(raw)
if meta.t ~= ARGV[2] or redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return -1 end
local stale = tonumber(ARGV[3])
local delivered = meta.n - stale
if delivered < 0 then return redis.error_reply('ack counts exceed the batch size') end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if delivered > 0 then redis.call('HINCRBY', KEYS[4], 'delivered', delivered) end
if stale > 0 then redis.call('HINCRBY', KEYS[4], 'stale', stale) end
redis.call('HINCRBY', KEYS[4], 'batches_delivered', 1)
return delivered
