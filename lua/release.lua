#!lua flags=allow-oom
-- release: hand a batch back without charging an attempt (the reporter is stopping).
-- allow-oom: the batch's lease entry becomes a retry entry of the same size; refusing it at
-- maxmemory would only make the batch wait for its lease to expire.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  stats      hash   the shard's counters
-- ARGV[1]  batch id
-- ARGV[2]  lease token
-- returns  1 if released, 0 if the lease is no longer held
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then return 0 end
local meta = cjson.decode(raw)
if meta.t ~= ARGV[2] or redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
meta.t = ''
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(meta))
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('HINCRBY', KEYS[4], 'batches_released', 1)
return 1
