#!lua flags=allow-oom
-- ack: finish a batch the endpoint accepted whole (some of its events may have been dropped
-- as stale before sending). Does nothing unless the caller still holds the lease.
-- Sent again after a lost reply (its receipt is there): answers what it answered, changes
-- nothing.  Metadata that cannot be used is set aside (lua/_guard.lua); the answer is then -1.
-- allow-oom: it deletes the batch's metadata and payload, bumps counters and leaves a receipt
-- of a few dozen bytes that expires after the receipt lifetime.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  quarantine list   records set aside, newest first
-- KEYS[6]  receipt    string this call's answer, kept for a resend (done:<batch id>)
-- KEYS[7]  order      zset   the games' queues of pending batches (lua/_order.lua)
-- ARGV[1]  batch_id: batch id
-- ARGV[2]  token: lease token
-- ARGV[3]  stale: events dropped as stale before sending (count)
-- ARGV[4]  receipt_ms: receipt lifetime in ms
-- returns  events counted as delivered, or -1 if the lease is not held
-- include: _guard
-- include: _order
guard_open('ack', KEYS[5], KEYS[4], {'delivered', 'stale', 'batches_delivered'})
local id, token = ARGV[1], ARGV[2]
local stale = arg_number(3, 'stale', 0, MAX_BATCH_EVENTS)
local raw = read('hash', false, 'HGET', KEYS[2], id)
local held = raw and read('zset', false, 'ZSCORE', KEYS[1], id)
if not held then return receipt_of(KEYS[6], token, is_whole) or -1 end
local meta, why = read_meta(raw)
if not meta then
  set_aside_batch(KEYS[2], KEYS[3], id, raw, why, true)
  redis.call('ZREM', KEYS[1], id)
  return -1
end
if meta.t ~= token then return receipt_of(KEYS[6], token, is_whole) or -1 end
local delivered = meta.n - stale
if delivered < 0 then return redis.error_reply('ack counts exceed the batch size') end
expect(KEYS[3], 'hash')
local member = queued_member(KEYS[7], id, meta)
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
if member then redis.call('ZREM', KEYS[7], member) end
if delivered > 0 then redis.call('HINCRBY', KEYS[4], 'delivered', delivered) end
if stale > 0 then redis.call('HINCRBY', KEYS[4], 'stale', stale) end
redis.call('HINCRBY', KEYS[4], 'batches_delivered', 1)
keep_receipt(KEYS[6], token, delivered, ARGV[4])
return delivered
