#!lua flags=no-writes
-- read_shard: one shard's whole state in one atomic read (for `status` and the totals), so
-- that no batch is caught between two states.  A key of another type than the shard needs
-- (junk the next script that writes it will set aside) reads as empty and is named among the
-- problems, so that `status` shows it instead of failing.
-- no-writes: it only reads, so Redis runs it at maxmemory too (a MULTI is refused there:
-- Redis refuses to queue any command in a transaction while memory is full).
--
-- KEYS[1]  ring       zset   active games, all scored 0 (in name order)
-- KEYS[2]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  dead       list   dead-lettered batch ids
-- KEYS[5]  stats      hash   the shard's counters
-- KEYS[6]  owner      string the reporter process holding the shard
-- KEYS[7]  batches    hash   batch id -> metadata (JSON)
-- KEYS[8...] q:<game> list   the buffers of the games the caller saw in the ring
-- returns  {ring, inflight ids, retry ids, dead length, stats (field, value, ...), owner or
--           nil, pending batches (id, metadata, ...: those in flight or waiting for a retry
--           that have metadata), problems (key, type found, ...), then per game of
--           KEYS[8...]: its length, its oldest entry or nil}
-- Only the pending batches' metadata is read (their events are counted as pending): dead
-- letters are counted by LLEN, never read, however many there are.
local problems = {}
local function read(absent, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    local key = select(2, ...)
    if not string.find(reply.err, 'WRONGTYPE', 1, true) then error(reply) end
    problems[#problems + 1] = key
    problems[#problems + 1] = redis.call('TYPE', key).ok
    return absent
  end
  return reply
end
local ring = read({}, 'ZRANGE', KEYS[1], 0, -1)
local inflight = read({}, 'ZRANGE', KEYS[2], 0, -1)
local retry = read({}, 'ZRANGE', KEYS[3], 0, -1)
local pending = {}
for _, id in ipairs(inflight) do pending[#pending + 1] = id end
for _, id in ipairs(retry) do pending[#pending + 1] = id end
local metas = {}
for first = 1, #pending, 1000 do -- HMGET in slices: unpack() is limited by Lua's stack
  local ids = {unpack(pending, first, math.min(first + 999, #pending))}
  local found = read(false, 'HMGET', KEYS[7], unpack(ids))
  if not found then break end -- not a hash: named once among the problems
  for i, id in ipairs(ids) do
    if found[i] then
      metas[#metas + 1] = id
      metas[#metas + 1] = found[i]
    end
  end
end
local out = {
  ring,
  inflight,
  retry,
  read(0, 'LLEN', KEYS[4]),
  read({}, 'HGETALL', KEYS[5]),
  read(false, 'GET', KEYS[6]),
  metas,
  problems,
}
for k = 8, #KEYS do
  out[#out + 1] = read(0, 'LLEN', KEYS[k])
  out[#out + 1] = read(false, 'LINDEX', KEYS[k], 0)
end
return out
