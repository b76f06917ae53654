#!lua flags=allow-oom
-- release: hand a batch back without charging an attempt (the reporter is stopping; its
-- game is held), due again now or after a delay.
-- Sent again after a lost reply (its receipt is there): answers what it answered, changes
-- nothing.  Metadata that cannot be used is set aside (lua/_guard.lua), answered with 0.
-- allow-oom: the batch's lease entry becomes a retry entry of the same size (and the receipt,
-- a few dozen bytes, expires after its lifetime); refusing it at maxmemory would only make
-- the batch wait for its lease to expire.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  payloads   hash   batch id -> entries (only to set a batch aside)
-- KEYS[6]  quarantine list   records set aside, newest first
-- KEYS[7]  receipt    string this call's answer, kept for a resend (done:<batch id>)
-- ARGV[1]  batch_id: batch id
-- ARGV[2]  token: lease token
-- ARGV[3]  delay_ms: due again this many ms from now (0: now)
-- ARGV[4]  receipt_ms: receipt lifetime in ms
-- returns  1 if released, 0 if the lease is no longer held
-- include: _guard
guard_open('release', KEYS[6], KEYS[4], {'batches_released'})
local id, token = ARGV[1], ARGV[2]
local delay = arg_number(3, 'delay_ms', 0, LONGEST_WAIT_MS)
local raw = read('hash', false, 'HGET', KEYS[2], id)
local held = raw and read('zset', false, 'ZSCORE', KEYS[1], id)
if not held then return receipt_of(KEYS[7], token, is_whole) or 0 end
local meta, why = read_meta(raw)
if not meta then
  set_aside_batch(KEYS[2], KEYS[5], id, raw, why, true)
  redis.call('ZREM', KEYS[1], id)
  return 0
end
if meta.t ~= token then return receipt_of(KEYS[7], token, is_whole) or 0 end
expect(KEYS[3], 'zset')
local now = clock_ms()
meta.t = ''
local json = cjson.encode(meta) -- before the first write (read_meta made sure it encodes)
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', KEYS[2], id, json)
redis.call('ZADD', KEYS[3], now + delay, id)
redis.call('HINCRBY', KEYS[4], 'batches_released', 1)
keep_receipt(KEYS[7], token, 1, ARGV[4])
return 1
