#!lua flags=allow-oom
-- purge: delete the oldest dead-lettered batches for good, counting their events.
-- Sent again after a lost reply (its receipt is there): answers what it answered and deletes
-- nothing more.  A dead letter whose metadata cannot be read is moved to the quarantine
-- instead (lua/_guard.lua), so that its events are not counted as purged from a guess.
-- allow-oom: it only deletes (and bumps a counter, and leaves a receipt of a few dozen
-- bytes that expires): the operator's way to free memory.
--
-- KEYS[1]  dead       list   dead-lettered batch ids, newest first
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  quarantine list   records set aside, newest first
-- KEYS[6]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- ARGV[1]  limit: batches to delete at most
-- ARGV[2]  receipt_ms: receipt lifetime in ms
-- returns  {batches deleted, events deleted}
-- include: _guard
guard_open('purge', KEYS[5], KEYS[4], {'purged'})
local done = receipt_of(KEYS[6], '')
if done then return done end
expect(KEYS[1], 'list')
expect(KEYS[2], 'hash')
expect(KEYS[3], 'hash')
local most = tonumber(ARGV[1])
local ids = redis.call('LRANGE', KEYS[1], -most, -1)
redis.call('LTRIM', KEYS[1], 0, -most - 1)
local events = 0
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    local meta, why = read_meta(raw)
    if meta then
      events = events + meta.n
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
    else
      set_aside_batch(KEYS[2], KEYS[3], id, raw, why, false)
    end
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'purged', events) end
local reply = {#ids, events}
keep_receipt(KEYS[6], '', reply, ARGV[2])
return reply
