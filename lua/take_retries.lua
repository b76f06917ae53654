#!lua flags=allow-oom
-- take_retries: lease batches whose retry time has come.
-- Sent again after a lost reply (its receipt is there): answers with the same batches, still
-- leased to this token, and takes no others.  A batch whose metadata cannot be used, or
-- whose payload is missing, is set aside (lua/_guard.lua); the others are taken.
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
-- ARGV[1]  token: lease token for every batch taken
-- ARGV[2]  lease_ms: lease length in ms
-- ARGV[3]  limit: batches to take at most
-- ARGV[4]  game: only batches of this game ('' = any game)
-- ARGV[5]  receipt_ms: receipt lifetime in ms
-- returns  {batch id, game, attempts so far, entries, ...}
-- include: _guard
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
local plan, taken = {}, 0
for _, id in ipairs(due) do
  if taken >= want then break end
  local step = {id = id, raw = redis.call('HGET', KEYS[3], id)}
  if step.raw then
    local blob = redis.call('HGET', KEYS[4], id)
    local meta, why, events = check_batch(KEYS[4], id, step.raw, blob)
    if not meta then
      step.why, step.events = why, events
    elseif ARGV[4] == '' or meta.g == ARGV[4] then
      meta.t = token
      step.meta, step.json = meta, cjson.encode(meta)
      step.blob = blob or ''
      taken = taken + 1
    else
      step = nil -- another game's: left waiting
    end
  end
  if step then plan[#plan + 1] = step end
end

local ids = {}
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
