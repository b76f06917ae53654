#!lua flags=allow-oom
-- nack: a delivery attempt failed. Schedule a retry with exponential backoff and full
-- jitter, or dead-letter the batch when it is rejected for good or out of attempts.
-- Sent again after a lost reply (its receipt is there): answers what it answered, changes
-- nothing.  Metadata that cannot be used is set aside (lua/_guard.lua), answered as 'lost'.
-- allow-oom: the batch only moves (its lease entry becomes a retry entry, or its id goes on
-- the dead list); the metadata gains the failure reason (at most a few hundred bytes) and
-- the dead list is trimmed to its cap here, freeing the oldest; the receipt (a few dozen
-- bytes) expires after its lifetime.  Refusing it at maxmemory would leave the batch to
-- expire and be reaped, the same move later.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  retry      zset   batch id -> when it is due (ms)
-- KEYS[5]  dead       list   dead-lettered batch ids, newest first
-- KEYS[6]  stats      hash   the shard's counters
-- KEYS[7]  quarantine list   records set aside, newest first
-- KEYS[8]  receipt    string this call's answer, kept for a resend (done:<batch id>)
-- KEYS[9]  order      zset   the games' queues of pending batches (lua/_order.lua): a
--                            batch dead-lettered leaves its game's; one to retry stays
-- ARGV[1]  batch_id: batch id
-- ARGV[2]  token: lease token
-- ARGV[3]  permanent: 1 = rejected for good (dead-letter now), 0 = may succeed later
-- ARGV[4]  min_delay_ms: least delay in ms (the endpoint's Retry-After), 0 if none
-- ARGV[5]  initial_ms: first backoff delay in ms
-- ARGV[6]  max_ms: longest backoff delay in ms
-- ARGV[7]  max_attempts: attempts before dead-lettering
-- ARGV[8]  jitter: a random number in [0, 1) for the jitter (scripts cannot draw their own)
-- ARGV[9]  dead_max: most dead-lettered batches kept in this shard
-- ARGV[10] reason: reason, kept with a dead letter
-- ARGV[11] receipt_ms: receipt lifetime in ms
-- returns  {state, delay ms}: state 'retry' or 'dead', or {'lost', 0} if the lease is not held
-- include: _guard
-- include: _dead
-- include: _backoff
-- include: _order
guard_open('nack', KEYS[7], KEYS[6],
           {'dead_events', 'dead_batches', 'batches_retried', 'dead_dropped'})
local id, token = ARGV[1], ARGV[2]
local least = arg_number(4, 'min_delay_ms', 0, LONGEST_WAIT_MS)
local first = arg_number(5, 'initial_ms', 0, LONGEST_WAIT_MS)
local longest = arg_number(6, 'max_ms', 0, LONGEST_WAIT_MS)
local attempts = arg_number(7, 'max_attempts', 1, MAX_ATTEMPTS)
local draw = arg_number(8, 'jitter', 0, 1, true)
local keep = arg_number(9, 'dead_max', 0, 2 ^ 31)
local function is_reply(r)
  return type(r) == 'table' and #r == 2 and type(r[1]) == 'string' and is_whole(r[2])
end
local raw = read('hash', false, 'HGET', KEYS[2], id)
local held = raw and read('zset', false, 'ZSCORE', KEYS[1], id)
if not held then return receipt_of(KEYS[8], token, is_reply) or {'lost', 0} end
local meta, why = read_meta(raw)
if not meta then
  set_aside_batch(KEYS[2], KEYS[3], id, raw, why, true)
  redis.call('ZREM', KEYS[1], id)
  return {'lost', 0}
end
if meta.t ~= token then return receipt_of(KEYS[8], token, is_reply) or {'lost', 0} end
expect(KEYS[3], 'hash')
expect(KEYS[4], 'zset')
expect(KEYS[5], 'list')

-- Everything decided, and encoded, before the first write.
local now = clock_ms()
meta.a = meta.a + 1
meta.t = ''
meta.r = ARGV[10]
local dead = ARGV[3] == '1' or meta.a >= attempts
local delay, trim, member = 0, nil, nil
if dead then
  meta.d = now
  trim = plan_trim(KEYS[5], KEYS[2], keep, 100, 1)
  member = queued_member(KEYS[9], id, meta)
else
  delay = math.min(backoff_ms(meta.a, first, longest, draw, least), LONGEST_WAIT_MS)
end
local json = cjson.encode(meta)

redis.call('ZREM', KEYS[1], id)
redis.call('HSET', KEYS[2], id, json)
local reply
if dead then
  redis.call('LPUSH', KEYS[5], id)
  if member then redis.call('ZREM', KEYS[9], member) end
  redis.call('HINCRBY', KEYS[6], 'dead_events', meta.n)
  redis.call('HINCRBY', KEYS[6], 'dead_batches', 1)
  trim_dead(trim, KEYS[5], KEYS[2], KEYS[3], KEYS[6], {[id] = meta.n})
  reply = {'dead', 0}
else
  redis.call('ZADD', KEYS[4], now + delay, id)
  redis.call('HINCRBY', KEYS[6], 'batches_retried', 1)
  reply = {'retry', delay}
end
keep_receipt(KEYS[8], token, reply, ARGV[11])
return reply
