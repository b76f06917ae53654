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
if #ARGV - 1 > 1000 then
  return redis.error_reply('ERR purge_ids: at most 1000 batch ids per call, not ' .. (#ARGV - 1))
end
local function is_reply(r)
  return type(r) == 'table' and #r == 2 and is_whole(r[1]) and is_whole(r[2])
end
local done = receipt_of(KEYS[6], '', is_reply)
if done then return done end
expect(KEYS[1], 'list')
expect(KEYS[2], 'hash')
expect(KEYS[3], 'hash')
-- Read and check every named dead letter first; write once all of them are known.
local plan, batches, events, seen = {}, 0, 0, {}
for k = 1, #ARGV - 1 do
  local id = ARGV[k]
  if not seen[id] and redis.call('LPOS', KEYS[1], id) then
    seen[id] = true
    local step = {id = id, raw = redis.call('HGET', KEYS[2], id)}
    if step.raw then
      local meta, why = read_meta(step.raw)
      if meta then
        events = events + meta.n
      else
        step.why = why
      end
    end
    if not step.why then batches = batches + 1 end
    plan[#plan + 1] = step
  end
end
for _, step in ipairs(plan) do
  redis.call('LREM', KEYS[1], 1, step.id)
  if step.why then
    set_aside_batch(KEYS[2], KEYS[3], step.id, step.raw, step.why, false)
  else
    redis.call('HDEL', KEYS[2], step.id)
    redis.call('HDEL', KEYS[3], step.id)
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'purged', events) end
local reply = {batches, events}
keep_receipt(KEYS[6], '', reply, ARGV[#ARGV])
return reply
