#!lua flags=allow-oom
-- reap: return batches whose lease expired (their reporter died or hung) to the retry queue,
-- charging one attempt, or dead-letter them when out of attempts. Bounded per call.
-- Sent again after a lost reply it reaps only what has expired since (each batch once: the
-- first call took the others out of the lease set), so it needs no receipt.  Metadata that
-- cannot be used is set aside (lua/_guard.lua).
-- allow-oom: each batch moves from the lease set to the retry set or the dead list (about
-- the same memory); the dead list is trimmed to its cap here.  Without it, batches of a
-- crashed reporter would stay leased forever once Redis is full.
--
-- KEYS[1]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[2]  batches    hash   batch id -> metadata (JSON)
-- KEYS[3]  payloads   hash   batch id -> entries
-- KEYS[4]  retry      zset   batch id -> when it is due (ms)
-- KEYS[5]  dead       list   dead-lettered batch ids, newest first
-- KEYS[6]  stats      hash   the shard's counters
-- KEYS[7]  quarantine list   records set aside, newest first
-- KEYS[8]  order      zset   the games' queues of pending batches (lua/_order.lua): a
--                            batch dead-lettered leaves its game's; one to retry stays
-- ARGV[1]  limit: batches to reap at most
-- ARGV[2]  max_attempts: attempts before dead-lettering
-- ARGV[3]  dead_max: most dead-lettered batches kept in this shard
-- returns  {batches returned to retry, batches dead-lettered}
-- include: _guard
-- include: _dead
-- include: _order
guard_open('reap', KEYS[7], KEYS[6], {'dead_events', 'dead_batches', 'batches_reaped',
                                      'dead_dropped'})
local most = arg_number(1, 'limit', 1, 10000)
local attempts = arg_number(2, 'max_attempts', 1, MAX_ATTEMPTS)
local keep = arg_number(3, 'dead_max', 0, 2 ^ 31)
local now = clock_ms()
local expired, far = due_members(KEYS[1], now, LONGEST_WAIT_MS, most)
if #expired == 0 then return {0, 0} end
expect(KEYS[2], 'hash')
expect(KEYS[3], 'hash')
expect(KEYS[4], 'zset')
expect(KEYS[5], 'list')

-- Read and check every batch first; write once all of them are known to be usable.
local plan, dead = {}, 0
for _, id in ipairs(expired) do
  local step = {id = id, raw = redis.call('HGET', KEYS[2], id)}
  if step.raw then
    local meta, why, events = check_batch(KEYS[3], id, step.raw)
    if meta then
      meta.a = meta.a + 1
      meta.t = ''
      meta.r = 'lease expired'
      if meta.a >= attempts then
        meta.d = now
        step.dead = true
        step.member = queued_member(KEYS[8], id, meta)
        dead = dead + 1
      end
      step.meta, step.json = meta, cjson.encode(meta)
    else
      step.why, step.events = why, events
    end
  end
  plan[#plan + 1] = step
end
local trim = dead > 0 and plan_trim(KEYS[5], KEYS[2], keep, 100 + dead, dead) or {}

local retried, added = 0, {}
for _, step in ipairs(plan) do
  redis.call('ZREM', KEYS[1], step.id)
  if far[step.id] then note_far_time(KEYS[1], step.id, far[step.id], 'a lease deadline') end
  if step.json then
    redis.call('HSET', KEYS[2], step.id, step.json)
    if step.dead then
      redis.call('LPUSH', KEYS[5], step.id)
      if step.member then redis.call('ZREM', KEYS[8], step.member) end
      added[step.id] = step.meta.n
      redis.call('HINCRBY', KEYS[6], 'dead_events', step.meta.n)
      redis.call('HINCRBY', KEYS[6], 'dead_batches', 1)
    else
      redis.call('ZADD', KEYS[4], now, step.id)
      retried = retried + 1
    end
  elseif step.raw then
    set_aside_batch(KEYS[2], KEYS[3], step.id, step.raw, step.why, true, step.events)
  end
end
trim_dead(trim, KEYS[5], KEYS[2], KEYS[3], KEYS[6], added)
if retried + dead > 0 then redis.call('HINCRBY', KEYS[6], 'batches_reaped', retried + dead) end
return {retried, dead}
