#!lua
-- collect: append events of one game to its capped buffer and register the game.
-- No allow-oom: it grows memory.  At maxmemory (policy noeviction) Redis refuses the whole
-- call before it runs (an OOM reply, nothing written); the SDK keeps the events, counts them
-- in refused_oom and sends them again once the reporters have drained some memory.
--
-- KEYS[1]  q:<game>   list   the game's buffer
-- KEYS[2]  active     set    games with buffered events
-- KEYS[3]  ring       zset   active games, all scored 0 (swept in name order)
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  marker     string the shard's identity (set here if absent)
-- KEYS[6]  quarantine list   records set aside, newest first (lua/_guard.lua)
-- ARGV[1]  game: game name
-- ARGV[2]  cap: most events the buffer keeps (the oldest go first)
-- ARGV[3]  ttl_seconds: buffer TTL in seconds, refreshed on every push
-- ARGV[4]  pre_evicted: events the client already evicted for this game before sending (count)
-- ARGV[5]  dropped_buffer_full: events the client dropped, its buffer full (count, reported here)
-- ARGV[6]  dropped_too_large: events the client dropped as too large (count, reported here)
-- ARGV[7]  entries: entries joined by "\n"; an entry is the 13-digit collect time in ms followed by
--          the event's JSON (which never holds a raw newline). One argument instead of one per
--          event halves the client's cost of sending them.
-- ARGV[8]  identity: the shard's identity, written if it has none ('' = one made from the time)
-- Written once, and duplicates merged (lua/_written_once.lua):
-- KEYS[7]  writes       hash   the shard's remembered writes (see _written_once.lua)
-- KEYS[8]  writers      zset   writer id -> ms of its latest write here
-- KEYS[9]  seen:<game>  zset   dedup key -> ms its first event was stored
-- ARGV[9]  writer: writer id, 1-64 of [A-Za-z0-9_.-] ('' = not remembered: applied every time)
-- ARGV[10] seq: the write's sequence number, counted from 1 per writer and shard
-- ARGV[11] low: the writer's lowest sequence number for this shard still without an answer
--          (<= ARGV[10]); the memory of the writes below it is let go
-- ARGV[12] writes_remembered_ms: ms a writer's writes are remembered after its latest write
--          here (the horizon)
-- ARGV[13] writers_per_shard: writers remembered per shard at most (the least recent forgotten
--          first)
-- ARGV[14] writes_per_writer: writes without an answer per writer and shard at most (ARGV[10] -
--          ARGV[11] must be less)
-- ARGV[15] dedup_window_ms: an entry "\30<key>\30<entry>" is merged (not stored) if an
--          entry of the game with the same key was stored within it (0 = keys ignored)
-- ARGV[16] dedup_keys_per_game: dedup keys remembered per game at most (the oldest forgotten first)
-- returns  {number of events the cap evicted, including ARGV[4]; the shard's identity;
--           entries merged; 1 if the write was a repeat (nothing stored: the numbers are
--           the first answer's), else 0}
-- include: _written_once
-- include: _guard
-- Poison set aside (lua/_guard.lua), before the first write: a key of another type than the
-- one below needs is moved to the quarantine, so no command below can fail half-way (the
-- events pushed and the call failed, and sent again).
guard_open('collect', KEYS[6], KEYS[4],
           {'stored', 'evicted', 'dropped_buffer_full', 'dropped_too_large', 'merged'})
expect(KEYS[1], 'list')
expect(KEYS[2], 'set')
expect_ring(KEYS[3], KEYS[2])
expect(KEYS[5], 'string')
local keyed = string.find(ARGV[7], '\30', 1, true) -- any entry with a dedup key (memchr)
if ARGV[9] ~= '' then -- only what this call will touch is checked
  expect(KEYS[7], 'hash')
  expect(KEYS[8], 'zset')
end
if keyed then expect(KEYS[9], 'zset') end

local game, cap, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local evicted = tonumber(ARGV[4])
local n = 0
local len = nil

-- == written once: a repeat is answered, not applied ======================================
local now_ms = 0 -- Redis time, read only when needed
if ARGV[9] ~= '' or keyed then now_ms = clock_ms() end
local once, first, bad = once_begin(KEYS[7], ARGV[9], ARGV[10], ARGV[11], ARGV[14])
if bad then return redis.error_reply('collect: ' .. bad) end
local function identity_of(offered)
  if offered == '' then
    local t = clock_raw()
    offered = 't' .. t[1] .. t[2]
  end
  return redis.call('SET', KEYS[5], offered, 'NX', 'GET') or offered
end
if first then
  once_end(once, KEYS[7], KEYS[8], nil, now_ms, tonumber(ARGV[12]), tonumber(ARGV[13]))
  local was_evicted, was_merged = string.match(first, '^(%d+) (%d+)$')
  return {tonumber(was_evicted), identity_of(ARGV[8]), tonumber(was_merged), 1}
end
local merged = 0
if keyed then
  n, merged, len = dedup_push(KEYS[1], KEYS[9], ARGV[7], now_ms, tonumber(ARGV[15]),
                              tonumber(ARGV[16]))
end
-- == end of written once ==================================================================

-- Cut with a plain find (memchr), not a pattern; unpack() is limited by Lua's stack, so push
-- in slices of 1000.
local blob, pos, slice = ARGV[7], 1, {}
if n > 0 then blob = '' end -- pushed with their dedup keys above
while pos <= #blob do
  local stop = string.find(blob, '\n', pos, true) or (#blob + 1)
  n = n + 1
  slice[#slice + 1] = string.sub(blob, pos, stop - 1)
  if #slice == 1000 then
    len = redis.call('RPUSH', KEYS[1], unpack(slice))
    slice = {}
  end
  pos = stop + 1
end
if #slice > 0 then len = redis.call('RPUSH', KEYS[1], unpack(slice)) end
if len == nil then len = redis.call('LLEN', KEYS[1]) end
if len > cap then
  redis.call('LTRIM', KEYS[1], len - cap, -1)
  evicted = evicted + (len - cap)
end
if len > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  if redis.call('SADD', KEYS[2], game) == 1 then
    redis.call('ZADD', KEYS[3], 0, game)
  end
end
if n + tonumber(ARGV[4]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'stored', n + tonumber(ARGV[4]))
end
if evicted > 0 then redis.call('HINCRBY', KEYS[4], 'evicted', evicted) end
if tonumber(ARGV[5]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'dropped_buffer_full', ARGV[5])
end
if tonumber(ARGV[6]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'dropped_too_large', ARGV[6])
end
-- == written once: remember the answer ====================================================
if merged > 0 then redis.call('HINCRBY', KEYS[4], 'merged', merged) end
once_end(once, KEYS[7], KEYS[8], evicted .. ' ' .. merged, now_ms, tonumber(ARGV[12]),
         tonumber(ARGV[13]))
-- == end of written once ==================================================================
return {evicted, identity_of(ARGV[8]), merged, 0}
