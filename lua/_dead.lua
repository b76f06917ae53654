-- (included by the scripts that dead-letter: claim, nack, reap, settle; after _guard)
-- Keeps a shard's dead list at most `keep` long: the oldest fall off its tail, their events
-- counted as dead_dropped. At most `most` go per call (a cap lowered by much is reached over
-- several calls, each of them short).  One whose metadata cannot be used is moved to the
-- quarantine instead (its events were counted in dead_events when it died).
-- In two steps, as every script works: plan_trim reads and checks before the call's first
-- write, trim_dead writes.

-- What trimming will do once `adding` letters go on the list: the letters on it now to drop,
-- oldest first, each with its metadata (nil: none; false: unusable, with why), and in
-- `fresh` how many of those this call adds go too (a cap below what one call adds).
local function plan_trim(dead, batches, keep, most, adding)
  local len = read('list', 0, 'LLEN', dead)
  local excess = math.min(len + adding - keep, most)
  local plan = {fresh = math.max(0, excess - len)}
  excess = math.min(excess, len)
  if excess <= 0 then return plan end
  local ids = redis.call('LRANGE', dead, -excess, -1)
  for k = #ids, 1, -1 do
    local id = ids[k]
    local raw = read('hash', false, 'HGET', batches, id)
    local step = {id = id, raw = raw}
    if raw then
      step.meta, step.why = read_meta(raw)
      step.meta = step.meta or false
    end
    plan[#plan + 1] = step
  end
  return plan
end

-- `added`: batch id -> events, of the letters this call added (after them, the oldest).
local function trim_dead(plan, dead, batches, payloads, stats, added)
  if #plan > 0 then redis.call('LTRIM', dead, 0, -#plan - 1) end
  for _ = 1, plan.fresh or 0 do
    local id = redis.call('RPOP', dead)
    if id then
      redis.call('HINCRBY', stats, 'dead_dropped', added[id] or 0)
      redis.call('HDEL', batches, id)
      redis.call('HDEL', payloads, id)
    end
  end
  for _, step in ipairs(plan) do
    if step.meta then
      redis.call('HINCRBY', stats, 'dead_dropped', step.meta.n)
      redis.call('HDEL', batches, step.id)
      redis.call('HDEL', payloads, step.id)
    elseif step.meta == false then
      set_aside_batch(batches, payloads, step.id, step.raw, step.why, false)
    end
  end
end
