#!lua flags=allow-oom
-- extend: renew the lease of a batch whose POST is taking long.
-- allow-oom: it rewrites the score of an existing lease entry (ZADD XX), which takes no
-- memory; a lease that lapsed at maxmemory would have the batch reaped and sent twice.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- ARGV[1]  batch id
-- ARGV[2]  lease token
-- ARGV[3]  new lease length in ms, from now
-- returns  1 if renewed, 0 if the lease is no longer held
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw or cjson.decode(raw).t ~= ARGV[2] then return 0 end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
