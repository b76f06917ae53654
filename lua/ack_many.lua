#!lua flags=allow-oom
-- ack_many: finish the batches of one lease the endpoint accepted whole, in one call: for
-- each, what ack.lua does for one (lua/_ack.lua), and its answer.  A lease's acks cost one
-- call's overhead (the guard, the counters, the clock) instead of one per batch.
-- Sent again after a lost reply (the receipts are there): answers what it answered, changes
-- nothing.  Metadata that cannot be used is set aside (lua/_guard.lua); that batch's answer is
-- then -1 and the others are acked.
-- allow-oom: it deletes the batches' metadata and payloads, bumps counters and leaves a
-- receipt of a few dozen bytes per batch that expires after the receipt lifetime.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  quarantine list   records set aside, newest first
-- KEYS[6]  order      zset   the games' queues of pending batches (lua/_order.lua)
-- KEYS[7..N+6] receipt string each batch's answer, kept for a resend (done:<batch id>)
-- ARGV[1]  token: lease token
-- ARGV[2..2N+1] acks: each batch's id, then its events dropped as stale before sending
-- ARGV[2N+2] receipt_ms: receipt lifetime in ms
-- returns  per batch, in order: events counted as delivered, or -1 if the lease is not held
-- include: _guard
-- include: _order
-- include: _ack
guard_open('ack_many', KEYS[5], KEYS[4], {'delivered', 'stale', 'batches_delivered'})
local n = #KEYS - 6
if n < 1 or #ARGV ~= 2 * n + 2 then
  return redis.error_reply(string.format('ERR ack_many: %d receipt keys need %d arguments, '
                                         .. 'not %d', n, 2 * n + 2, #ARGV))
end
local ids, stales, receipts = {}, {}, {}
for k = 1, n do
  ids[k] = ARGV[2 * k]
  stales[k] = arg_number(2 * k + 1, 'stale', 0, MAX_BATCH_EVENTS)
  receipts[k] = KEYS[6 + k]
end
return ack_batches(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], ARGV[1], ids, stales,
                   receipts, ARGV[#ARGV])
