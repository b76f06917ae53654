#!lua flags=allow-oom
-- take_retries: lease batches whose retry time has come.
-- Sent again after a lost reply (its receipt is there): answers with the same batches, still
-- leased to this token, and takes no others.  A batch whose metadata cannot be used, or
-- whose payload is missing, is set aside (lua/_guard.lua); the others are taken.
-- A batch with a place in its game's queue (claimed in order, lua/_order.lua) goes only as
-- its game's head, with the batches right behind it: a due batch whose head is leased or not
-- due yet is moved behind it (due 1 ms after the head's lease or retry time), so that it
-- does not stand in the way of other games' due batches meanwhile.
-- allow-oom: each batch moves from the retry set to the lease set and its metadata gets a
-- new token of the same length: no growth but the receipt (the ids taken), which expires
-- after its lifetime; the retries are what a full Redis must send first.
--
-- KEYS[1]  retry      zset   batch id -> when it is due (ms)
-- KEYS[2]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[3]  batches    hash   batch id -> metadata (JSON)
-- KEYS[4]  payloads   hash   batch id -> entries
-- KEYS[5]  stats      hash   the shard's counters (only of what is set aside)
-- KEYS[6]  quarantine list   records set aside, newest first
-- KEYS[7]  receipt    string this call's answer, kept for a resend (done:<token>)
-- KEYS[8]  order      zset   the games' queues of pending batches, in order (lua/_order.lua)
-- ARGV[1]  token: lease token for every batch taken
-- ARGV[2]  lease_ms: lease length in ms
-- ARGV[3]  limit: batches to take at most
-- ARGV[4]  game: only batches of this game ('' = any game)
-- ARGV[5]  receipt_ms: receipt lifetime in ms
-- returns  {batch id, game, attempts so far, entries, ...}
-- include: _guard
-- include: _order
guard_open('take_retries', KEYS[6], KEYS[5], {})
local token = ARGV[1]
local lease = arg_number(2, 'lease_ms', 1, LONGEST_WAIT_MS)
local want = arg_number(3, 'limit', 1, 1000)
local out = {}
local function add(id, meta, blob)
  out[#out + 1] = id
  out[#out + 1] = meta.g
  out[#out + 1] = meta.a
  out[#out + 1] = blob or read('hash', false, 'HGET', KEYS[4], id) or ''
end

-- A resend finds its batches still leased to its token (none left: the caller had its
-- answer and finished them, so this is a new call under the same token).
local done = receipt_of(KEYS[7], token, function(r) return is_strings(r, want) end)
if done then
  for _, id in ipairs(done) do
    local raw = read('hash', false, 'HGET', KEYS[3], id)
    local meta = raw and read_meta(raw)
    if meta and meta.t == token and read('zset', false, 'ZSCORE', KEYS[2], id) then
      add(id, meta)
    end
  end
  if #out > 0 then return out end
end

local now = clock_ms()
local due, far = due_members(KEYS[1], now, LONGEST_WAIT_MS,
                             ARGV[4] == '' and want or want * 8)
if #due == 0 then return out end
expect(KEYS[2], 'zset')
expect(KEYS[3], 'hash')
expect(KEYS[4], 'hash')

-- Read and check every batch first; write once all of them are known to be usable.
local plan, taken, planned = {}, 0, {}

-- The step of batch `id` (metadata `raw`): leased to this call if it can be used, else set
-- aside; `meta` if already decoded.
local function lease_step(id, raw, meta, why, events, blob)
  local step = {id = id, raw = raw}
  planned[id] = true
  if not meta then
    step.why, step.events = why, events
    return step
  end
  meta.t = token
  step.meta, step.json = meta, cjson.encode(meta)
  step.blob = blob or ''
  taken = taken + 1
  return step
end

-- In order: what each game's queue said in this call ({base = the time its due batches
-- wait behind, or nil}), the members found gone, and the due batches moved behind a head.
local queues, gone_members, behind = {}, {}, {}
local function look_queue(game)
  local live, gone = order_look(KEYS[8], KEYS[2], KEYS[1], game)
  if #gone > 0 then gone_members[#gone_members + 1] = gone end
  local head, q = live[1], {}
  queues[game] = q
  if not head then return q end
  -- A time further ahead than any script sets is junk: such a retry is due now (as
  -- due_members has it), and nothing waits behind such a lease longer than a lease can last.
  local longest = now + LONGEST_WAIT_MS + CLOCK_SLACK_MS
  if head.due and head.due > longest then head.due = now end
  if head.lease or head.due > now then
    q.base = math.min(head.lease or head.due, now + LONGEST_WAIT_MS)
    return q
  end
  -- The head is due: it goes, with the batches right behind it that wait for a retry (they
  -- waited only for it), as many as this call takes.
  for _, e in ipairs(live) do
    if not e.due or taken >= want then break end
    local raw = read('hash', false, 'HGET', KEYS[3], e.id)
    if not raw then break end
    local blob = read('hash', false, 'HGET', KEYS[4], e.id)
    local meta, why, events = check_batch(KEYS[4], e.id, raw, blob)
    plan[#plan + 1] = lease_step(e.id, raw, meta, why, events, blob)
    if not meta then break end -- set aside; the next one is the head of a later call
  end
  return q
end

for _, id in ipairs(due) do
  if taken >= want then break end
  if not planned[id] then
    local raw = redis.call('HGET', KEYS[3], id)
    local step
    if not raw then
      step = {id = id} -- a retry without its batch: only taken out of the set
    else
      local blob = redis.call('HGET', KEYS[4], id)
      local meta, why, events = check_batch(KEYS[4], id, raw, blob)
      local mine = not meta or ARGV[4] == '' or meta.g == ARGV[4] -- else left waiting
      if mine and meta and queued_member(KEYS[8], id, meta) then
        local q = queues[meta.g] or look_queue(meta.g)
        if q.base and not planned[id] then behind[#behind + 1] = {id, q.base + 1} end
      elseif mine then
        step = lease_step(id, raw, meta, why, events, blob)
      end
    end
    if step then plan[#plan + 1] = step end
  end
end
if #gone_members + #behind > 0 then expect(KEYS[8], 'zset') end

local ids = {}
for _, gone in ipairs(gone_members) do drop_members(KEYS[8], gone) end
for _, b in ipairs(behind) do
  redis.call('ZADD', KEYS[1], string.format('%.0f', b[2]), b[1])
end
for _, step in ipairs(plan) do
  redis.call('ZREM', KEYS[1], step.id)
  if far[step.id] then note_far_time(KEYS[1], step.id, far[step.id], 'a retry time') end
  if step.json then
    redis.call('HSET', KEYS[3], step.id, step.json)
    redis.call('ZADD', KEYS[2], now + lease, step.id)
    add(step.id, step.meta, step.blob)
    ids[#ids + 1] = step.id
  elseif step.raw then
    set_aside_batch(KEYS[3], KEYS[4], step.id, step.raw, step.why, true, step.events)
  end
end
if #ids > 0 then keep_receipt(KEYS[7], token, ids, ARGV[5]) end
return out
