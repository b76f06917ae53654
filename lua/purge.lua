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
local most = arg_number(1, 'limit', 1, 10000)
local function is_reply(r)
  return type(r) == 'table' and #r == 2 and is_whole(r[1]) and is_whole(r[2])
end
local done = receipt_of(KEYS[6], '', is_reply)
if done then return done end
expect(KEYS[1], 'list')
expect(KEYS[2], 'hash')
expect(KEYS[3], 'hash')
local ids = redis.call('LRANGE', KEYS[1], -most, -1)
-- Read and check every dead letter first; write once all of them are known.
local plan, events = {}, 0
for _, id in ipairs(ids) do
  local step = {id = id, raw = redis.call('HGET', KEYS[2], id)}
  if step.raw then
    local meta, why = read_meta(step.raw)
    if meta then
      events = events + meta.n
    else
      step.why = why
    end
  end
  plan[#plan + 1] = step
end
redis.call('LTRIM', KEYS[1], 0, -#ids - 1)
for _, step in ipairs(plan) do
  if step.why then
    set_aside_batch(KEYS[2], KEYS[3], step.id, step.raw, step.why, false)
  elseif step.raw then
    redis.call('HDEL', KEYS[2], step.id)
    redis.call('HDEL', KEYS[3], step.id)
  end
end
if events > 0 then redis.call('HINCRBY', KEYS[4], 'purged', events) end
local reply = {#ids, events}
keep_receipt(KEYS[6], '', reply, ARGV[2])
return reply
