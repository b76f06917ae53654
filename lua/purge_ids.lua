#!lua flags=allow-oom
-- purge_ids: delete the named dead-lettered batches for good, counting their events.  A
-- batch that is no longer on the dead list (replayed or purged meanwhile) is left alone.
-- Sent again after a lost reply (its receipt is there): answers what it answered (the ids are
-- off the dead list already, so it would delete nothing more anyway).  A dead letter whose
-- metadata cannot be read is moved to the quarantine instead (lua/_guard.lua).
-- allow-oom: it only deletes (and bumps a counter, and leaves a receipt of a few dozen
-- bytes that expires): the operator's way to free memory.
--
-- KEYS[1]  dead       list   dead-lettered batch ids, newest first
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  quarantine list   records set aside, newest first
-- KEYS[6]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- ARGV[1..N]  batch_ids: the batch ids to delete (at most a few hundred per call: each is an LREM)
-- ARGV[N+1]   receipt_ms: (the last) receipt lifetime in ms
-- returns  {batches deleted, events deleted}
-- include: _guard
guard_open('purge_ids', KEYS[5], KEYS[4], {'purged'})
local done = receipt_of(KEYS[6], '')
if done then return done end
expect(KEYS[1], 'list')
expect(KEYS[2], 'hash')
expect(KEYS[3], 'hash')
local batches, events = 0, 0
for k = 1, #ARGV - 1 do
  local id = ARGV[k]
  if redis.call('LREM', KEYS[1], 1, id) == 1 then
    local raw = redis.call('HGET', KEYS[2], id)
    local meta, why
    if raw then meta, why = read_meta(raw) end
    if raw and not meta then
      set_aside_batch(KEYS[2], KEYS[3], id, raw, why, false)
    else
      if meta then events = events + meta.n end
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
      batches = batches + 1
    end
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'purged', events) end
local reply = {batches, events}
keep_receipt(KEYS[6], '', reply, ARGV[#ARGV])
return reply
