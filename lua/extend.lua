#!lua flags=allow-oom
-- extend: renew the lease of a batch whose POST is taking long.
-- Sent again after a lost reply it renews again, from a little later: the same lease, held
-- the same way (no counter, no receipt).  Metadata that cannot be used is set aside
-- (lua/_guard.lua), answered with 0.
-- allow-oom: it rewrites the score of an existing lease entry (ZADD XX), which takes no
-- memory; a lease that lapsed at maxmemory would have the batch reaped and sent twice.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries (only to set a batch aside)
-- KEYS[4]  stats      hash   the shard's counters (only of what is set aside)
-- KEYS[5]  quarantine list   records set aside, newest first
-- ARGV[1]  batch_id: batch id
-- ARGV[2]  token: lease token
-- ARGV[3]  lease_ms: new lease length in ms, from now
-- returns  1 if renewed, 0 if the lease is no longer held
-- include: _guard
guard_open('extend', KEYS[5], KEYS[4], {})
local id = ARGV[1]
local lease = arg_number(3, 'lease_ms', 1, LONGEST_WAIT_MS)
local raw = read('hash', false, 'HGET', KEYS[2], id)
local held = raw and read('zset', false, 'ZSCORE', KEYS[1], id)
if not held then return 0 end
local meta, why = read_meta(raw)
if not meta then
  set_aside_batch(KEYS[2], KEYS[3], id, raw, why, true)
  redis.call('ZREM', KEYS[1], id)
  return 0
end
if meta.t ~= ARGV[2] then return 0 end
local now = clock_ms()
redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
return 1
