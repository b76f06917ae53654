#!lua flags=allow-oom
-- ack: finish a batch the endpoint accepted whole (some of its events may have been dropped
-- as stale before sending). Does nothing unless the caller still holds the lease.
-- Sent again after a lost reply (its receipt is there): answers what it answered, changes
-- nothing.  Metadata that cannot be used is set aside (lua/_guard.lua); the answer is then -1.
-- The work is lua/_ack.lua's, which ack_many does for the batches of a lease in one call.
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
-- include: _ack
guard_open('ack', KEYS[5], KEYS[4], {'delivered', 'stale', 'batches_delivered'})
local stale = arg_number(3, 'stale', 0, MAX_BATCH_EVENTS)
local answers = ack_batches(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], ARGV[2], {ARGV[1]},
                            {stale}, {KEYS[6]}, ARGV[4])
if answers.err then return answers end
return answers[1]
