#!lua flags=no-writes
-- read_shard: one shard's whole state in one atomic read (for `status` and the totals), so
-- that no batch is caught between two states.
-- no-writes: it only reads, so Redis runs it at maxmemory too (a MULTI is refused there:
-- Redis refuses to queue any command in a transaction while memory is full).
--
-- KEYS[1]  ring       zset   active games, all scored 0 (in name order)
-- KEYS[2]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  dead       list   dead-lettered batch ids
-- KEYS[5]  stats      hash   the shard's counters
-- KEYS[6]  owner      string the reporter process holding the shard
-- KEYS[7]  batches    hash   batch id -> metadata (JSON)
-- KEYS[8...] q:<game> list   the buffers of the games the caller saw in the ring
-- returns  {ring, inflight ids, retry ids, dead length, stats (field, value, ...), owner or
--           nil, batches (id, metadata, ...), then per game of KEYS[8...]: its length, its
--           oldest entry or nil}
local out = {
  redis.call('ZRANGE', KEYS[1], 0, -1),
  redis.call('ZRANGE', KEYS[2], 0, -1),
  redis.call('ZRANGE', KEYS[3], 0, -1),
  redis.call('LLEN', KEYS[4]),
  redis.call('HGETALL', KEYS[5]),
  redis.call('GET', KEYS[6]),
  redis.call('HGETALL', KEYS[7]),
}
for k = 8, #KEYS do
  out[#out + 1] = redis.call('LLEN', KEYS[k])
  out[#out + 1] = redis.call('LINDEX', KEYS[k], 0)
end
return out
